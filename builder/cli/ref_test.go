package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/osimage"
)

// TestUsageErrorsExit2: a malformed reference or a missing output
// directory is bad usage (exit 2, README "Exit codes"), said before any
// request; inspect, pull and push exited 1.
func TestUsageErrorsExit2(t *testing.T) {
	output := t.TempDir() // push needs an output before it reads REF
	if err := os.WriteFile(filepath.Join(output, osimage.ManifestFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"inspect", "Bad Ref"}, "REF: "},
		{[]string{"inspect", "--insecure", "Bad Ref"}, "REF: "},
		{[]string{"pull", "Bad Ref", t.TempDir()}, "REF: "},
		{[]string{"pull", "oci:", t.TempDir()}, "empty layout path"},
		{[]string{"push", output, "Bad Ref"}, "REF: "},
		{[]string{"push", missing}, missing},
		{[]string{"push", missing, "oci:" + t.TempDir()}, missing},
		{[]string{"index", output, missing, "oci:" + t.TempDir()}, missing},
		{[]string{"index", output, output, "Bad Ref"}, "REF: "},
	} {
		code, _, stderr := runBuilder(t, tc.args...)
		if code != exitcode.Usage || !strings.Contains(stderr, tc.says) {
			t.Errorf("builder %s: exit %d, stderr %q; want %d naming %q", strings.Join(tc.args, " "), code, stderr, exitcode.Usage, tc.says)
		}
	}
}
