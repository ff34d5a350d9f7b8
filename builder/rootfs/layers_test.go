package rootfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/initrd/rootstack"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// mountRootStack mounts a root stack read-only the way the init stacks it
// (each part through a loop device at its offset, overlayfs lowerdir
// top:...:base) and returns the merged tree; unmounted at cleanup.
func mountRootStack(t testing.TB, stack string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "root (loop devices and mounts)")
	}
	f, err := os.Open(stack)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	parts, err := rootstack.Read(f, fi.Size())
	f.Close()
	if errors.Is(err, rootstack.ErrNotStack) { // a flat image, as older builds made
		parts, err = []rootstack.Part{{Offset: 0, Size: fi.Size()}}, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var lowers []string
	for i, p := range parts {
		m := filepath.Join(dir, fmt.Sprint(i))
		if err := os.Mkdir(m, 0o755); err != nil {
			t.Fatal(err)
		}
		testutil.Run(t, "mount", "-t", "squashfs", "-o", fmt.Sprintf("loop,ro,offset=%d,sizelimit=%d", p.Offset, p.Size), stack, m)
		t.Cleanup(func() { unix.Unmount(m, unix.MNT_DETACH) })
		lowers = append([]string{m}, lowers...)
	}
	merged := filepath.Join(dir, "merged")
	if err := os.Mkdir(merged, 0o755); err != nil {
		t.Fatal(err)
	}
	if len(lowers) == 1 {
		return lowers[0]
	}
	if err := unix.Mount("overlay", merged, "overlay", unix.MS_RDONLY, "lowerdir="+strings.Join(lowers, ":")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

// TestLayeredTree: what the layers do to the mounted base (write, replace,
// delete, replace a directory) comes out of the top layer, stacked on the
// base as the init stacks it, as the same tree a flat image would hold:
// deletions as whiteouts, replaced directories opaque, and no overlayfs
// bookkeeping of the build's own mount in the image.
func TestLayeredTree(t *testing.T) {
	buildertest.RequireTools(t, "mksquashfs")
	if os.Geteuid() != 0 {
		testutil.Missing(t, "root (loop devices and mounts)")
	}
	ctx := context.Background()
	work := t.TempDir()
	base := filepath.Join(work, "base")
	for p, data := range map[string]string{
		"etc/unit":             "base unit",
		"etc/ssh/host_key":     "secret",
		"usr/share/old/a":      "a",
		"usr/share/old/b":      "b",
		"usr/bin/tool":         "tool",
		"etc/machine-id":       "",
		"var/lib/keep/ordinal": "1",
	} {
		buildertest.Must(t, os.MkdirAll(filepath.Join(base, filepath.Dir(p)), 0o755))
		buildertest.Must(t, os.WriteFile(filepath.Join(base, p), []byte(data), 0o644))
	}
	baseImg := filepath.Join(work, "base.squashfs")
	buildertest.Must(t, mksquashfs(ctx, base, baseImg, buildertest.Epoch))

	var tree *layeredTree
	err := inPrivateMounts(func() error {
		var err error
		if tree, err = mountLayered(ctx, []string{baseImg}, work); err != nil {
			return err
		}
		root, err := fsroot.Open(tree.merged)
		if err != nil {
			return err
		}
		defer root.Close()
		for _, err := range []error{
			root.WriteFile("/etc/unit", strings.NewReader("layer unit"), 0o644),
			root.Remove("/etc/ssh/host_key"),
			root.RemoveAll("/usr/share/old"),
			root.MkdirAll("/usr/share/old", 0o755),
			root.WriteFile("/usr/share/old/new", strings.NewReader("new"), 0o644),
			root.Chmod("/var/lib/keep/ordinal", 0o600), // a metadata-only change
		} {
			if err != nil {
				return err
			}
		}
		return nil // no unmount: the namespace goes with the thread
	})
	if err != nil {
		t.Fatal(err)
	}
	// The mounts stayed in the namespace: this thread, in the namespace the
	// test started in, never saw them.
	runtime.LockOSThread()
	b, err := os.ReadFile("/proc/thread-self/mountinfo")
	runtime.UnlockOSThread()
	if err != nil || strings.Contains(string(b), tree.merged) {
		t.Errorf("the overlay shows outside its namespace (%v)", err)
	}
	buildertest.Must(t, cleanUpper(tree.upper))
	topImg := filepath.Join(work, "top.squashfs")
	buildertest.Must(t, mksquashfs(ctx, tree.upper, topImg, buildertest.Epoch))

	// Only the overlay's opaque markers may remain.
	filepathWalk(t, tree.upper, func(p string) {
		names, err := listXattrs(p)
		buildertest.Must(t, err)
		for _, n := range names {
			if strings.HasPrefix(n, overlayXattrPref) && n != overlayXattrPref+"opaque" {
				t.Errorf("%s keeps %s", p, n)
			}
		}
	})
	if fi, err := os.Stat(topImg); err != nil || fi.Size() > 64<<10 {
		t.Errorf("top layer %v bytes: want only what changed", fi.Size())
	}

	stack := filepath.Join(work, "root.img")
	sf, err := os.Create(stack)
	buildertest.Must(t, err)
	_, err = rootstack.Write(sf, []string{baseImg, topImg})
	buildertest.Must(t, err)
	buildertest.Must(t, sf.Close())
	merged := mountRootStack(t, stack)
	for p, want := range map[string]string{"etc/unit": "layer unit", "usr/share/old/new": "new", "usr/bin/tool": "tool", "var/lib/keep/ordinal": "1"} {
		if b, err := os.ReadFile(filepath.Join(merged, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
	for _, gone := range []string{"etc/ssh/host_key", "usr/share/old/a", "usr/share/old/b"} {
		if _, err := os.Lstat(filepath.Join(merged, gone)); !os.IsNotExist(err) {
			t.Errorf("%s: %v; want it gone", gone, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(merged, "var/lib/keep/ordinal")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("var/lib/keep/ordinal: %v, %v; want mode 0600 from the top layer", fi, err)
	}
	if fi, err := os.Stat(merged); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("root directory: %v, %v; want the base's 0755", fi, err)
	}
}

func filepathWalk(t *testing.T, dir string, f func(p string)) {
	t.Helper()
	buildertest.Must(t, filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			f(p)
		}
		return err
	}))
}

// TestLayeredTreeNoDevNoSuid: the layers and the overlay over them are
// mounted nodev,nosuid: a device node a layer ships (a hostile or broken
// base) cannot reach its driver through the build's mounts, nor a setuid
// file gain privilege; the builder only writes files into the tree.
func TestLayeredTreeNoDevNoSuid(t *testing.T) {
	buildertest.RequireTools(t, "mksquashfs")
	if os.Geteuid() != 0 {
		testutil.Missing(t, "root (loop devices, device nodes and mounts)")
	}
	ctx := context.Background()
	work := t.TempDir()
	base := filepath.Join(work, "base")
	buildertest.Must(t, os.MkdirAll(filepath.Join(base, "dev"), 0o755))
	// The host's /dev/null numbers: a device that opens wherever nodev is missing.
	buildertest.Must(t, unix.Mknod(filepath.Join(base, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	buildertest.Must(t, os.WriteFile(filepath.Join(base, "suid"), []byte("#!/bin/sh\n"), 0o755))
	buildertest.Must(t, unix.Chmod(filepath.Join(base, "suid"), 0o4755))
	img := filepath.Join(work, "base.squashfs")
	buildertest.Must(t, mksquashfs(ctx, base, img, buildertest.Epoch))

	type check struct {
		name, mount string
		opts        string // the per-mount options in mountinfo
		openErr     error  // opening dev/null through the mount
	}
	var got []check
	var upper string
	err := inPrivateMounts(func() error {
		tree, err := mountLayered(ctx, []string{img}, work)
		if err != nil {
			return err
		}
		defer tree.unmount()
		// The namespace is this thread's: /proc/self would show the process's.
		info, err := os.ReadFile("/proc/thread-self/mountinfo")
		if err != nil {
			return err
		}
		for name, m := range map[string]string{"layer": tree.lowers[0], "overlay": tree.merged} {
			c := check{name: name, mount: m}
			for _, l := range strings.Split(string(info), "\n") {
				if f := strings.Fields(l); len(f) > 5 && f[4] == m {
					c.opts = f[5]
				}
			}
			fd, err := unix.Open(filepath.Join(m, "dev/null"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Close(fd)
			}
			c.openErr = err
			got = append(got, c)
		}
		// What the build writes is not changed by the flags: a device node
		// and a setuid file made through the overlay land in upper as made.
		if err := unix.Mknod(filepath.Join(tree.merged, "dev/zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
			return fmt.Errorf("mknod through the overlay: %w", err)
		}
		if err := unix.Chmod(filepath.Join(tree.merged, "suid"), 0o6755); err != nil {
			return fmt.Errorf("chmod through the overlay: %w", err)
		}
		upper = tree.upper
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(upper, "dev/zero"), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 5) {
		t.Errorf("upper dev/zero: %+v, %v; want the char device 1:5", st, err)
	}
	if fi, err := os.Lstat(filepath.Join(upper, "suid")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != os.ModeSetuid|os.ModeSetgid {
		t.Errorf("upper suid: %v, %v; want setuid and setgid kept", fi, err)
	}
	if len(got) != 2 {
		t.Fatalf("checked %d mounts, want the layer and the overlay", len(got))
	}
	for _, c := range got {
		opts := strings.Split(c.opts, ",")
		for _, want := range []string{"nodev", "nosuid"} {
			if !slices.Contains(opts, want) {
				t.Errorf("%s %s mounted %q: want %s", c.name, c.mount, c.opts, want)
			}
		}
		if !errors.Is(c.openErr, unix.EACCES) {
			t.Errorf("%s: open dev/null through the mount: %v, want EACCES (nodev)", c.name, c.openErr)
		}
	}
}

// TestLayerImageLink: a layer step's image that is a symlink (a cache entry
// pointing at an image or a device elsewhere) is refused before mount,
// which would follow it.
func TestLayerImageLink(t *testing.T) {
	work := t.TempDir()
	elsewhere := filepath.Join(t.TempDir(), "other.squashfs")
	buildertest.Must(t, os.WriteFile(elsewhere, []byte("hsqs, not ours"), 0o644))
	img := filepath.Join(work, "layer.squashfs")
	buildertest.Must(t, os.Symlink(elsewhere, img))
	err := inPrivateMounts(func() error {
		_, err := mountLayered(context.Background(), []string{img}, work)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("mountLayered of a linked image: %v, want it refused as not a regular file", err)
	}
}
