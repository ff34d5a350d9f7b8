package builder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/initrd/rootstack"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// buildTree builds the tree's test recipe into out with the cache at
// cacheDir and returns how long it took.
func buildTree(t testing.TB, tree, out, cacheDir string) time.Duration {
	t.Helper()
	r, err := recipe.Load(filepath.Join(tree, "recipes/test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := buildLane(context.Background(), r, Options{OutputDir: out, CacheDir: cacheDir}); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// rangeSum is the sha256 of n bytes at off of the file p.
func rangeSum(t *testing.T, p string, off, n int64) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, off, n)); err != nil {
		t.Fatal(err)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// stackParts reads the part table of a built root stack.
func stackParts(t *testing.T, p string) []rootstack.Part {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	parts, err := rootstack.Read(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

// TestOneUnitRebuildBoots changes one unit of the test recipe and rebuilds:
// the base layer (root stack part 0, the live initrd's first segment) must
// be the earlier build's bytes, only the top layer changes, and the rebuilt
// disk.raw boots with the changed unit running. The rebuilt kernel + initrd
// are not booted: checkLiveInitrdMatchesDisk proves they carry the kernel,
// init and root layers that disk.raw just booted, and the live path itself
// is TestBootLiveKernelInitrd's.
func TestOneUnitRebuildBoots(t *testing.T) {
	t.Parallel()
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs", "qemu-system-x86_64")
	if testing.Short() {
		t.Skip("builds the test recipe twice and boots it")
	}
	tree := buildertest.CopyRecipeTree(t)
	cacheDir := cache.DefaultDir() // reuse the packages
	before, after := filepath.Join(tree, "out-before"), filepath.Join(tree, "out-after")
	buildTree(t, tree, before, cacheDir)

	unit := filepath.Join(tree, "units/os-builder-hello.service")
	data, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("changed unit %d", time.Now().UnixNano())
	changed := bytes.Replace(data, []byte(`"os-builder: hello from layer"`), []byte(`"os-builder: hello from layer, `+marker+`"`), 1)
	if bytes.Equal(changed, data) {
		t.Fatal("the unit's greeting line moved; update this test")
	}
	if err := os.WriteFile(unit, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	took := buildTree(t, tree, after, cacheDir)
	t.Logf("one unit changed: rebuilt in %v", took.Round(10*time.Millisecond))

	// Digests taken while writing are the files' digests.
	m, err := osimage.ReadManifest(after)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range m.Artifacts {
		if got := testutil.FileSHA256(t, filepath.Join(after, a.Path)); got != a.SHA256 {
			t.Errorf("%s: manifest says sha256 %s, the file has %s", a.Path, a.SHA256, got)
		}
	}

	// The base is reused byte for byte, the top layer is new.
	pb, pa := stackParts(t, filepath.Join(before, artifacts.FileRootfs)), stackParts(t, filepath.Join(after, artifacts.FileRootfs))
	if len(pb) != 2 || len(pa) != 2 {
		t.Fatalf("root stacks of %d and %d parts, want 2", len(pb), len(pa))
	}
	if pb[0] != pa[0] || rangeSum(t, filepath.Join(before, artifacts.FileRootfs), pb[0].Offset, pb[0].Size) != rangeSum(t, filepath.Join(after, artifacts.FileRootfs), pa[0].Offset, pa[0].Size) {
		t.Error("the base layer changed with one unit")
	}
	if pb[1] == pa[1] && rangeSum(t, filepath.Join(before, artifacts.FileRootfs), pb[1].Offset, pb[1].Size) == rangeSum(t, filepath.Join(after, artifacts.FileRootfs), pa[1].Offset, pa[1].Size) {
		t.Error("the top layer did not change with the unit")
	}
	seg := pb[0].Size // the base segment is at least the base image long
	if rangeSum(t, filepath.Join(before, artifacts.FileInitrd), 0, seg) != rangeSum(t, filepath.Join(after, artifacts.FileInitrd), 0, seg) {
		t.Error("the live initrd's base segment changed with one unit")
	}

	// The live kernel + initrd carry what disk.raw boots, with the command
	// line of the build before (one unit changes no kernel parameter).
	checkLiveInitrdMatchesDisk(t, after, "BOOTX64.EFI")
	if b, a := testutil.ReadFile(t, filepath.Join(before, artifacts.FileCmdline)), testutil.ReadFile(t, filepath.Join(after, artifacts.FileCmdline)); !bytes.Equal(b, a) {
		t.Errorf("the command line changed with one unit: %q, then %q", b, a)
	}

	greeting := "os-builder: hello from layer, " + marker
	disk := filepath.Join(t.TempDir(), "disk.raw")
	if err := command.Run(context.Background(), "cp", "--sparse=always", filepath.Join(after, artifacts.FileDisk), disk); err != nil {
		t.Fatal(err)
	}
	bootAndExpect(t, qemu.Config{Disks: []string{disk}}, toMultiUser, "root=partlabel:osb-root", greeting)
}
