package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestBuildRefusesForeignOutput: `builder build --output DIR` swapped DIR
// out and deleted what it held, `--output .` included. Now a DIR that is not
// new, empty or an earlier output is refused before the build starts, as
// bad usage, and its files survive.
func TestBuildRefusesForeignOutput(t *testing.T) {
	// The layer's image source is a closed port: a build that was not
	// refused fails at its preflight within a second (exit 4), instead of
	// building for minutes and then deleting the files.
	addr := testutil.FreeAddr(t)
	tree := t.TempDir()
	files := map[string]string{
		"recipe.yaml": "name: r\nversion: \"1\"\nbase: {distribution: debian}\nunitsDir: .\nlayers: [layer.yaml]\n",
		"layer.yaml":  "name: l\noci:\n  - image: " + addr + "/osb/none@sha256:" + strings.Repeat("0", 64) + "\n    paths: {/a: /a}\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(tree, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for _, output := range []string{"dir", "."} {
		t.Run(output, func(t *testing.T) {
			dir := t.TempDir()
			t.Chdir(dir)
			if output == "dir" {
				dir = filepath.Join(dir, "srv")
				output = dir
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			keep := filepath.Join(dir, "precious.txt")
			if err := os.WriteFile(keep, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := Main([]string{"build", filepath.Join(tree, "recipe.yaml"), "--output", output, "--cache-dir", t.TempDir()}, &stdout, &stderr)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d (bad usage); stderr:\n%s", code, ExitUsage, stderr.String())
			}
			want := "builder: output " + output + `: holds "precious.txt" and no manifest.json, so it is not an earlier output of this builder; refusing to replace it`
			if !strings.HasPrefix(stderr.String(), want) {
				t.Errorf("stderr:\n%s\nwant it to start with:\n%s", stderr.String(), want)
			}
			if b, err := os.ReadFile(keep); err != nil || string(b) != "keep" {
				t.Errorf("precious.txt did not survive: %q, %v", b, err)
			}
		})
	}
}
