package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// The root image is layered (package rootstack): the base, the
// bootstrapped packages, is squashed once per package set by the bootstrap
// step; the binaries step squashes the oci and go steps' files on top of it
// (once per set of binaries); the assemble step squashes only what the
// recipe's files, units and users change on top of those. Each is cached,
// so changing a unit re-squashes kilobytes, and the artifacts are joined
// from the images.

const binariesVersion = "3"

// overlayXattrPref prefixes the overlayfs attributes a copy-up leaves.
const overlayXattrPref = "trusted.overlay."

// squashLayer packs a layer step's tree (or overlay upper directory) as its
// image in out.
func squashLayer(ctx context.Context, tree, out string, epoch int64) error {
	return mksquashfs(ctx, tree, filepath.Join(out, step.LayerImage), epoch)
}

// layerImages are the images of layer step outputs dirs.
func layerImages(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		out = append(out, filepath.Join(d, step.LayerImage))
	}
	return out
}

// binariesStep puts the oci and go steps' files over the base: a layer of
// their own, so that a unit or file change does not squash them again.
type binariesStep struct {
	base     string // bootstrap step output
	baseKey  string
	binaries []step.Binary
	epoch    int64
	work     string
}

// NewBinaries is the step that lays bins over the base layer, the bottom
// of below, as a layer of their own.
func NewBinaries(below step.Stack, bins []step.Binary, epoch int64, work string) step.Step {
	return &binariesStep{base: below.Layers[0].Dir, baseKey: below.Key, binaries: bins, epoch: epoch, work: work}
}

// BinariesLayer is the layer in the binaries step's output out.
func BinariesLayer(out string) step.Layer { return step.Layer{Dir: out, Name: step.BinariesLayer} }

func (s *binariesStep) Name() string { return "binaries" }

func (s *binariesStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", binariesVersion)
	in.AddDigest("base", s.baseKey)
	// Each binary by the key of the step that made it, as the layers
	// below stand for theirs: not hashed again (hundreds of MB).
	for _, b := range s.binaries {
		if b.StepKey == "" {
			return nil, fmt.Errorf("binary %s from %s: no step key", b.Dest, b.Step)
		}
		in.AddDigest("binary:"+b.Dest, cache.DigestString(b.StepKey+"/"+filepath.Base(b.Src)))
	}
	in.Add("source-date-epoch", strconv.FormatInt(s.epoch, 10))
	return in, nil
}

func (s *binariesStep) Run(ctx context.Context, out string) error {
	upper, err := overLayers(ctx, []string{s.base}, s.work, func(root *fsroot.Root) error {
		return installBinaries(root, s.binaries)
	})
	if err != nil {
		return err
	}
	return squashLayer(ctx, upper, out, s.epoch)
}

// overLayers runs change on the layer step outputs lowers (bottom first)
// mounted with a writable overlay on top, in a mount namespace of its own,
// and returns the overlay's upper directory: what change did, ready to be
// squashed as the next layer.
func overLayers(ctx context.Context, lowers []string, work string, change func(root *fsroot.Root) error) (string, error) {
	var upper string
	err := inPrivateMounts(func() error {
		tree, err := mountLayered(ctx, layerImages(lowers), work)
		if err != nil {
			return err
		}
		defer tree.unmount()
		upper = tree.upper
		// Every path in the tree resolves inside it, as in a chroot: the
		// tree's own symlinks (/var/run -> /run) or a layer's cannot make
		// the builder write, remove or read host files.
		root, err := fsroot.Open(tree.merged)
		if err != nil {
			return err
		}
		err = change(root)
		root.Close()
		if err != nil {
			return err
		}
		return tree.unmount()
	})
	if err != nil {
		return "", err
	}
	return upper, cleanUpper(upper)
}

// inPrivateMounts runs f on an OS thread of its own, in a mount namespace
// of its own: the mounts f makes are invisible to the host and vanish with
// the namespace when f returns (the thread exits with its goroutine) or
// the builder dies, kill -9 included, so a killed build leaves no mount
// behind for the next one's sweep to trip over. Commands f runs inherit
// the namespace (they are forked from the locked thread).
func inPrivateMounts(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("mount namespace (the builder needs root): %w", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			errc <- fmt.Errorf("make mounts private: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// layeredTree is the base image mounted read-only with a writable overlay
// on it: what is written to merged lands in upper, deletions as overlayfs
// whiteouts, replaced directories marked opaque, which is the form the
// init's overlay reads in a lower layer.
type layeredTree struct {
	lowers        []string // bottom first
	upper, merged string
}

// mountLayered mounts imgs (bottom first, read-only, through loop devices)
// and a writable overlay over them in a new directory under work.
//
// All of them nodev,nosuid: the builder writes files into the tree and
// never opens a device node through it, and the only programs it runs from
// the tree (chroot ... chown, as root) need neither setuid nor file
// capabilities, so a device node or setuid file a layer ships stays inert.
// Not noexec: that chown is the image's own. The flags do not change what
// is written (mknod and chmod u+s work on a nodev,nosuid mount), so the
// layers come out byte for byte as before.
func mountLayered(ctx context.Context, imgs []string, work string) (*layeredTree, error) {
	dir, err := os.MkdirTemp(work, "layered-")
	if err != nil {
		return nil, err
	}
	t := &layeredTree{upper: filepath.Join(dir, "upper"), merged: filepath.Join(dir, "merged")}
	ovlWork := filepath.Join(dir, "work")
	for _, d := range []string{t.upper, t.merged, ovlWork} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	var lowerOpt []string // top first
	for i, img := range imgs {
		m := filepath.Join(dir, "lower"+strconv.Itoa(i))
		if err := os.Mkdir(m, 0o755); err != nil {
			t.unmount()
			return nil, err
		}
		// mount follows links: a layer step's image must be its own
		// regular file, not a link to a file or device elsewhere.
		if fi, err := os.Lstat(img); err != nil || !fi.Mode().IsRegular() {
			t.unmount()
			if err == nil {
				err = fmt.Errorf("%s: not a regular file (%s)", img, fi.Mode().Type())
			}
			return nil, fmt.Errorf("mount layer: %w", err)
		}
		if err := command.Run(ctx, "mount", "-t", "squashfs", "-o", "loop,ro,nodev,nosuid", img, m); err != nil {
			t.unmount()
			return nil, fmt.Errorf("mount layer %s (the builder needs root for loop devices and overlayfs): %w", img, err)
		}
		t.lowers = append(t.lowers, m)
		lowerOpt = append([]string{m}, lowerOpt...)
	}
	if len(t.lowers) == 0 {
		return nil, fmt.Errorf("no layer to build on")
	}
	// The upper directory's attributes become the root's: take the base's.
	var st unix.Stat_t
	if err := unix.Stat(t.lowers[0], &st); err != nil {
		t.unmount()
		return nil, err
	}
	if err := os.Chmod(t.upper, fs.FileMode(st.Mode&0o7777)); err != nil {
		t.unmount()
		return nil, err
	}
	if err := os.Lchown(t.upper, int(st.Uid), int(st.Gid)); err != nil {
		t.unmount()
		return nil, err
	}
	// No index, redirects or metacopy: the upper directory must hold whole
	// files, whiteouts and opaque markers only, readable as a lower layer.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,redirect_dir=off,metacopy=off,xino=off,volatile", strings.Join(lowerOpt, ":"), t.upper, ovlWork)
	if err := unix.Mount("overlay", t.merged, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts); err != nil {
		t.unmount()
		return nil, fmt.Errorf("mount overlay over the base image (%s): %w", opts, err)
	}
	return t, nil
}

// unmount detaches the overlay and the layers; it is safe to call twice.
func (t *layeredTree) unmount() error {
	var errs []error
	for _, m := range append([]string{t.merged}, t.lowers...) {
		if err := unix.Unmount(m, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// cleanUpper drops the overlayfs bookkeeping a copy-up leaves in upper
// (origin file handles, impure markers): they name inodes of this build's
// mount, not content. Only opaque markers mean something to a reader.
func cleanUpper(upper string) error {
	return filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		names, err := listXattrs(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, n := range names {
			if strings.HasPrefix(n, overlayXattrPref) && n != overlayXattrPref+"opaque" {
				if err := unix.Lremovexattr(p, n); err != nil {
					return fmt.Errorf("%s: remove %s: %w", p, n, err)
				}
			}
		}
		return nil
	})
}

func listXattrs(p string) ([]string, error) {
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n == 0 {
		return nil, err
	}
	buf := make([]byte, n)
	if n, err = unix.Llistxattr(p, buf); err != nil {
		return nil, err
	}
	var names []string
	for _, s := range strings.Split(string(buf[:n]), "\x00") {
		if s != "" {
			names = append(names, s)
		}
	}
	return names, nil
}
