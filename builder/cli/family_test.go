package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
)

func runBuilder(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestUnknownCommandIsUsage: an unknown command exited 1 (the build
// failed), an unknown subcommand of a group printed the group's help and
// exited 0; both are bad usage (2), as in serverboot.
func TestUnknownCommandIsUsage(t *testing.T) {
	for _, args := range [][]string{{"frobnicate"}, {"cache", "frobnicate"}, {"ignition", "validat", "x"}, {"build", "--nope", "r.yaml"}} {
		code, _, stderr := runBuilder(t, args...)
		if code != exitcode.Usage || !strings.Contains(stderr, "unknown") {
			t.Errorf("builder %s: exit %d, want %d naming the unknown word; stderr %q", strings.Join(args, " "), code, exitcode.Usage, stderr)
		}
	}
	if code, _, stderr := runBuilder(t, "ignition", "validat", "x"); !strings.Contains(stderr, "did you mean validate?") {
		t.Errorf("exit %d, stderr %q: want a suggestion", code, stderr)
	}
}

// TestJSONShape: every command that reports something takes --json and
// prints one indented JSON object on stdout: push, pull, cache import,
// cache ls, cache prune, ignition validate, genkey (push, cache import,
// cache prune and ignition validate had no --json).
func TestJSONShape(t *testing.T) {
	out := t.TempDir()
	if _, err := osimagetest.WriteOutputDir(out, "amd64"); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir())
	cacheDir := t.TempDir()
	ign := filepath.Join(t.TempDir(), "node.ign")
	if err := os.WriteFile(ign, []byte(`{"ignition":{"version":"3.3.0"},"storage":{"files":[{"path":"/usr/bin/x","contents":{"source":"data:,x"},"mode":493}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}

	var pushed struct{ Reference, Digest string }
	steps := []struct {
		args []string
		want int
		into any
		keys []string
	}{
		{[]string{"push", out, "oci:layout:1", "--json"}, exitcode.OK, &pushed, []string{"reference", "digest"}},
		{[]string{"pull", "oci:layout:1", "pulled", "--json"}, exitcode.OK, nil, []string{"recipe", "artifacts"}},
		{nil, exitcode.OK, nil, []string{"image", "digest", "store"}}, // cache import, once the digest is known
		{[]string{"cache", "ls", "--cache-dir", cacheDir, "--json"}, exitcode.OK, nil, nil},
		{[]string{"cache", "prune", "--all", "--cache-dir", cacheDir, "--json"}, exitcode.OK, nil, []string{"dir", "freedBytes"}},
		{[]string{"ignition", "validate", ign, "--json"}, exitcode.Failed, nil, []string{"file", "ok", "warnings", "findings"}},
		{[]string{"genkey", "keys", "--json"}, exitcode.OK, nil, []string{"key", "cert"}},
	}
	for i, s := range steps {
		if s.args == nil {
			s.args = []string{"cache", "import", "--cache-dir", cacheDir, "--json", "example.com/os@" + pushed.Digest, "layout"}
		}
		code, stdout, stderr := runBuilder(t, s.args...)
		if code != s.want {
			t.Fatalf("step %d builder %v: exit %d, want %d; stderr %q", i, s.args, code, s.want, stderr)
		}
		if !strings.HasSuffix(stdout, "\n") || (len(strings.TrimSpace(stdout)) > 2 && !strings.Contains(stdout, "\n  ")) {
			t.Errorf("builder %v: want indented JSON ending in a newline, got %q", s.args, stdout)
		}
		var obj any
		if err := json.Unmarshal([]byte(stdout), &obj); err != nil {
			t.Fatalf("builder %v: stdout is not JSON: %v\n%s", s.args, err, stdout)
		}
		if s.into != nil {
			if err := json.Unmarshal([]byte(stdout), s.into); err != nil {
				t.Fatal(err)
			}
		}
		for _, k := range s.keys {
			if m, ok := obj.(map[string]any); !ok || m[k] == nil {
				t.Errorf("builder %v: JSON lacks %q: %s", s.args, k, stdout)
			}
		}
	}
	if !strings.HasPrefix(pushed.Digest, "sha256:") || pushed.Reference != "oci:layout:1" {
		t.Errorf("push reported %+v", pushed)
	}
}

// TestPullRefusesNonEmptyDir: `builder pull` (documented in
// docs/image-format.md, missing until now) writes into a new or empty
// directory only, and what it writes matches what was pushed.
func TestPullRefusesNonEmptyDir(t *testing.T) {
	out := t.TempDir()
	if _, err := osimagetest.WriteOutputDir(out, "amd64"); err != nil {
		t.Fatal(err)
	}
	layout := "oci:" + filepath.Join(t.TempDir(), "layout") + ":1"
	if code, _, stderr := runBuilder(t, "push", out, layout); code != exitcode.OK {
		t.Fatalf("push: exit %d: %s", code, stderr)
	}
	busy := t.TempDir()
	if err := os.WriteFile(filepath.Join(busy, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runBuilder(t, "pull", layout, busy); code != exitcode.Usage || !strings.Contains(stderr, `holds "keep"`) {
		t.Errorf("pull into a non-empty dir: exit %d, stderr %q", code, stderr)
	}
	dest := filepath.Join(t.TempDir(), "new")
	code, stdout, stderr := runBuilder(t, "pull", layout, dest)
	if code != exitcode.OK || !strings.Contains(stdout, "uki.efi") {
		t.Fatalf("pull: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for _, f := range []string{"uki.efi", "disk.raw", "manifest.json"} {
		want, _ := os.ReadFile(filepath.Join(out, f))
		got, err := os.ReadFile(filepath.Join(dest, f))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: pulled %d bytes (%v), pushed %d", f, len(got), err, len(want))
		}
	}
}
