package pid1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/initrd/rootstack"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// squash packs a tree made by fill into a squashfs image.
func squash(t *testing.T, name string, fill func(dir string)) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(dir)
	img := dir + ".squashfs"
	testutil.Run(t, "mksquashfs", dir, img, "-noappend", "-quiet", "-no-progress")
	return img
}

// TestMountRootLayers mounts a two-layer root, as a stack file and as the
// initrd's layer directory, with real loop devices and overlayfs: the top
// layer's files win, its whiteout hides a base file, and the base's other
// files show through.
func TestMountRootLayers(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "root (loop devices and mounts)")
	}
	testutil.RequireTool(t, "mksquashfs")
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base := squash(t, "base", func(d string) {
		write(filepath.Join(d, "etc/unit"), "base")
		write(filepath.Join(d, "etc/machine-key"), "secret")
		write(filepath.Join(d, "usr/bin/tool"), "tool")
	})
	top := squash(t, "top", func(d string) {
		write(filepath.Join(d, "etc/unit"), "top")
		// An overlayfs whiteout: what the builder's overlay leaves for a
		// file the layers removed.
		if err := unix.Mknod(filepath.Join(d, "etc/machine-key"), unix.S_IFCHR, 0); err != nil {
			t.Fatal(err)
		}
	})
	stack := filepath.Join(t.TempDir(), "root.img")
	f, err := os.Create(stack)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rootstack.Write(f, []string{base, top}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	layersDir := t.TempDir()
	for name, img := range map[string]string{"00": base, "01": top} {
		if err := os.Link(img, filepath.Join(layersDir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for name, src := range map[string]string{"stack": stack, "layer directory": layersDir} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			lowerDir, overlayDir, root := filepath.Join(dir, "lower"), filepath.Join(dir, "overlay"), filepath.Join(dir, "root")
			lower, err := mountRootLayers(src, lowerDir)
			t.Cleanup(func() {
				for _, m := range []string{root, overlayDir, filepath.Join(lowerDir, "1"), filepath.Join(lowerDir, "0")} {
					unix.Unmount(m, unix.MNT_DETACH)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if want := lowerDir + "/1:" + lowerDir + "/0"; lower != want {
				t.Fatalf("lowerdir %q, want %q (top first)", lower, want)
			}
			if err := mountOverlay(lower, overlayDir, root); err != nil {
				t.Fatal(err)
			}
			for p, want := range map[string]string{"etc/unit": "top", "usr/bin/tool": "tool"} {
				if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
					t.Errorf("%s: %q, %v; want %q", p, b, err, want)
				}
			}
			if _, err := os.Lstat(filepath.Join(root, "etc/machine-key")); !os.IsNotExist(err) {
				t.Errorf("etc/machine-key: %v; want it hidden by the top layer's whiteout", err)
			}
		})
	}
}

// TestMountRootLayersRejectsBadStack: a damaged table is an error naming
// the image, not a mount of whatever the offsets point at.
func TestMountRootLayersRejectsBadStack(t *testing.T) {
	p := filepath.Join(t.TempDir(), "root.img")
	h, _, _, err := rootstack.Layout([]int64{1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, h, 0o644); err != nil { // the part is missing
		t.Fatal(err)
	}
	_, err = mountRootLayers(p, filepath.Join(t.TempDir(), "lower"))
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "past the end") {
		t.Fatalf("got %v, want an error naming %s and the bad part", err, p)
	}
}
