package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return ptmx, tty
}

// filledCache returns a cache directory holding one entry.
func filledCache(t *testing.T) (string, *cache.Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := cache.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var in cache.Inputs
	in.Add("x", "1")
	if _, err := s.Fill(context.Background(), "step", in, func(d string) error {
		return os.WriteFile(filepath.Join(d, "f"), []byte("hours of work"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	return dir, s, in.Key()
}

// TestCachePruneAsks: `cache prune` without a flag deleted the whole cache
// without asking. Now it asks on a terminal (only y/yes deletes), refuses
// elsewhere with exit 2 naming --all, and --all or --older-than say what
// to delete without a question.
func TestCachePruneAsks(t *testing.T) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	defer func(f *os.File) { stdin = f }(stdin)

	tests := []struct {
		name    string
		flags   []string
		answer  string // typed on a terminal; "" means no terminal
		want    int
		stderr  string
		removed bool
	}{
		{"no terminal refuses", nil, "", exitcode.Usage, "refusing without a terminal to ask on; add --all (or --older-than DURATION)", false},
		{"terminal no", nil, "n\n", exitcode.Usage, "not confirmed; nothing done", false},
		{"terminal empty answer", nil, "\n", exitcode.Usage, "not confirmed", false},
		{"terminal yes", nil, "yes\n", exitcode.OK, "remove every entry of the cache", true},
		{"--all", []string{"--all"}, "", exitcode.OK, "", true},
		{"--older-than keeps fresh entries", []string{"--older-than", "1h"}, "", exitcode.OK, "", false},
		{"--all with --older-than", []string{"--all", "--older-than", "1h"}, "", exitcode.Usage, "exclude each other", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir, s, key := filledCache(t)
			stdin = devNull
			if tc.answer != "" {
				ptmx, tty := openPTY(t)
				if _, err := ptmx.Write([]byte(tc.answer)); err != nil {
					t.Fatal(err)
				}
				stdin = tty
			}
			code, stdout, stderr := runBuilder(t, append([]string{"cache", "prune", "--cache-dir", dir}, tc.flags...)...)
			if code != tc.want || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, want %d; stderr %q, want it to contain %q; stdout %q", code, tc.want, stderr, tc.stderr, stdout)
			}
			if _, ok := s.Lookup(key); ok == tc.removed {
				t.Errorf("entry present: %t, want %t", ok, !tc.removed)
			}
		})
	}
}
