package builder

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/recipe"
)

// TestTrixieBuildsAndBoots builds the test recipe on Debian trixie instead
// of bookworm (a newer systemd, kernel and merged /usr) and boots its live
// kernel + initrd to multi-user.
func TestTrixieBuildsAndBoots(t *testing.T) {
	t.Parallel()
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs", "qemu-system-x86_64")
	if testing.Short() {
		t.Skip("builds an image")
	}
	tree := buildertest.CopyRecipeTree(t)
	path := filepath.Join(tree, "recipes/test.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	trixie := strings.Replace(string(b), "release: bookworm", "release: trixie", 1)
	trixie = strings.Replace(trixie, "name: test\n", "name: test-trixie\n", 1)
	if trixie == string(b) {
		t.Fatal("test recipe names no bookworm release to replace")
	}
	path = filepath.Join(tree, "recipes/test-trixie.yaml")
	if err := os.WriteFile(path, []byte(trixie), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := recipe.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r.Outputs = []recipe.Output{recipe.OutputPXE}
	out := filepath.Join(tree, "out")
	m, err := buildLane(context.Background(), r, Options{OutputDir: out, CacheDir: cache.DefaultDir()})
	if err != nil {
		t.Fatal(err)
	}
	if m.OSRelease["VERSION_CODENAME"] != "trixie" {
		t.Fatalf("built %q, want trixie", m.OSRelease["VERSION_CODENAME"])
	}
	bootAndExpect(t, qemu.Config{
		Kernel: filepath.Join(out, artifacts.FileKernel),
		Initrd: filepath.Join(out, artifacts.FileInitrd),
		Append: m.Cmdline,
	}, toMultiUser, "Debian GNU/Linux 13")
}
