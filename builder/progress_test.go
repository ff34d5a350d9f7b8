package builder

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"

	"github.com/ironcore-dev/os-builder/recipe"
)

// TestReporterModes: a step's own progress reaches each output mode: the
// live block on a terminal (redrawn in place), periodic lines in plain
// mode, progress events in JSON; every mode ends the step with its result.
func TestReporterModes(t *testing.T) {
	defer func(d time.Duration) { PlainEvery = d }(PlainEvery)
	PlainEvery = 0
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"tty", []string{"\033[1A\r\033[J", "bootstrap", "running", "3 of 10 packages", "bootstrap                        built in", "go:x                             FAILED after"}},
		{ModePlain, []string{"bootstrap: start", "bootstrap: running 1s  3 of 10 packages", "bootstrap                        built in", "go:x                             FAILED after"}},
		{ModeJSON, []string{`{"step":"bootstrap","state":"start"`, `"state":"progress","done":3,"total":10,"unit":"packages"`, `"step":"go:x","state":"failed"`, `"error":"boom"`}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var out testutil.SyncBuffer
			r := NewReporterMode(&out, false, tc.mode)
			r.beginStep("bootstrap")
			r.beginStep("go:x")
			ctx := withMeter(context.Background(), r, "bootstrap")
			reportProgress(ctx, 3, 10, "packages")
			time.Sleep(1100 * time.Millisecond) // one tick of every mode
			r.endStep("go:x", errors.New("boom"), 0)
			r.endStep("bootstrap", nil, 1<<20)
			r.Close()
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%q", w, out.String())
				}
			}
			if tc.mode == ModeJSON {
				parseEvents(t, []byte(out.String()))
			}
			rows := r.Summary()
			if len(rows) != 2 || rows[0].Step != "bootstrap" || rows[0].Size != 1<<20 || !rows[1].Failed {
				t.Errorf("summary %+v", rows)
			}
		})
	}
}

// TestGoBuildProgress: a go step reports packages compiled of the count
// go list gives, from go build -v, with the Go build cache out of play.
func TestGoBuildProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches a module")
	}
	t.Setenv("GOCACHE", t.TempDir()) // cold: every package compiles
	step := &goBuildStep{g: recipe.GoBuild{
		Module:  "golang.org/x/example/hello",
		Version: "v0.0.0-20250915201037-7f05d217867b",
		Package: ".",
		Binary:  "/usr/bin/hello",
	}, arch: "amd64"}
	r := NewReporterMode(nil, false, ModePlain)
	if err := step.Run(withMeter(context.Background(), r, "go:hello"), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	s := r.steps["go:hello"]
	r.mu.Unlock()
	if s == nil || s.unit != "packages" || s.total < 10 || s.done < s.total/2 || s.done > s.total {
		t.Fatalf("progress %+v: want most of the go list -deps count compiled", s)
	}
	t.Logf("%d of %d packages", s.done, s.total)
}

// TestWrittenBytes: a file sized first and written in part counts the
// bytes written, not its size; a file written whole counts its size.
func TestWrittenBytes(t *testing.T) {
	dir := t.TempDir()
	sparse, err := os.Create(filepath.Join(dir, "disk.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer sparse.Close()
	mustDo(t, sparse.Truncate(64<<20))
	_, err = sparse.WriteAt(make([]byte, 1<<20), 8<<20)
	mustDo(t, err)
	mustDo(t, os.WriteFile(filepath.Join(dir, "uki.efi"), []byte("uki"), 0o644))
	got := writtenBytes(dir)
	if got < 1<<20+3 || got > 2<<20 {
		t.Errorf("written bytes %d, want the 1 MiB written plus 3 (not the 64 MiB size)", got)
	}
}
