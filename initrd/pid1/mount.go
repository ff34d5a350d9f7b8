package pid1

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/initrd/rootstack"
)

// earlyMounts are the API file systems the init needs, later moved into the
// final root so systemd finds them mounted.
var earlyMounts = []struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
}{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755"},
	{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755"},
}

func mountEarly() error {
	for _, m := range earlyMounts {
		if err := os.MkdirAll(m.target, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", m.target, err)
		}
		if err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
		}
	}
	return nil
}

// setupConsole points stdin, stdout and stderr at /dev/console. The kernel
// only does so when the initramfs has /dev/console; with devtmpfs mounted
// it is always there.
func setupConsole() error {
	fd, err := unix.Open("/dev/console", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/console: %w", err)
	}
	for target := 0; target <= 2; target++ {
		if err := unix.Dup3(fd, target, 0); err != nil {
			return fmt.Errorf("dup /dev/console to fd %d: %w", target, err)
		}
	}
	return unix.Close(fd)
}

// checkInitramfs refuses to go on unless / is the initramfs (ramfs or
// tmpfs): switching root deletes everything on it.
func checkInitramfs() error {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		return fmt.Errorf("statfs /: %w", err)
	}
	if st.Type != unix.RAMFS_MAGIC && st.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("/ is not an initramfs (file system type %#x); refusing to run", st.Type)
	}
	return nil
}

// loadModules loads the modules listed in file, in order. A module that is
// already loaded is fine. A module that fails to load is reported but not
// fatal: some are hardware specific (crc32c_intel needs SSE4.2), and a
// missing capability shows up later as a clear mount or device error.
func (i *initProcess) loadModules(file string) error {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		i.debugf("no %s; loading no modules", file)
		return nil
	}
	if err != nil {
		return fmt.Errorf("open module list: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		p := strings.TrimSpace(sc.Text())
		if p == "" || strings.HasPrefix(p, "#") {
			continue
		}
		if err := loadModule(p); err != nil {
			// ENODEV: the module is for hardware or CPU features this
			// machine lacks (crc32c-intel without SSE4.2); expected.
			if errors.Is(err, unix.ENODEV) {
				i.debugf("skipped: %v", err)
			} else {
				i.logf("WARNING: %v", err)
			}
			continue
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read module list %s: %w", file, err)
	}
	i.debugf("loaded %d modules", n)
	return nil
}

func loadModule(path string) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("load module %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.FinitModule(fd, "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("load module %s: %w", path, err)
	}
	return nil
}

// fsTypeAt tells squashfs from erofs by their magic numbers at offset off
// of f, so the root image format can change without a new command line
// parameter.
func fsTypeAt(f *os.File, off int64) (string, error) {
	buf := make([]byte, 1028)
	if _, err := f.ReadAt(buf, off); err != nil {
		return "", fmt.Errorf("read root image %s at %d: %w", f.Name(), off, err)
	}
	switch {
	case string(buf[:4]) == "hsqs":
		return "squashfs", nil
	case buf[1024] == 0xe2 && buf[1025] == 0xe1 && buf[1026] == 0xf5 && buf[1027] == 0xe0:
		return "erofs", nil
	}
	return "", fmt.Errorf("root image %s at %d is neither squashfs nor erofs", f.Name(), off)
}

// mountRootLayers mounts the read-only layers of the root at src under
// lowerDir (LowerDir) and returns the overlay's lowerdir option, top layer first. src
// is one image (mounted at lowerDir), a root stack (rootstack: each part at
// lowerDir/N through a loop device at its offset) or the initrd's
// layout.RootLayersDir (each file, bottom first by name, at lowerDir/N).
func mountRootLayers(src, lowerDir string) (string, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", fmt.Errorf("root image: %w", err)
	}
	type layer struct {
		file         string
		offset, size int64 // size 0: the whole file
	}
	var layers []layer
	switch {
	case fi.IsDir():
		entries, err := os.ReadDir(src)
		if err != nil {
			return "", fmt.Errorf("root layers: %w", err)
		}
		for _, e := range entries { // ReadDir sorts by name: bottom first
			layers = append(layers, layer{file: filepath.Join(src, e.Name())})
		}
	default:
		parts, err := stackParts(src)
		if err != nil {
			return "", err
		}
		if parts == nil {
			return lowerDir, mountRootImage(src, lowerDir, 0, 0)
		}
		for _, p := range parts {
			layers = append(layers, layer{src, p.Offset, p.Size})
		}
	}
	if len(layers) == 0 || len(layers) > rootstack.MaxParts {
		return "", fmt.Errorf("root %s: %d layers, want 1 to %d", src, len(layers), rootstack.MaxParts)
	}
	dirs := make([]string, len(layers))
	for n, l := range layers {
		target := filepath.Join(lowerDir, strconv.Itoa(n))
		if err := mountRootImage(l.file, target, l.offset, l.size); err != nil {
			return "", fmt.Errorf("root layer %d: %w", n, err)
		}
		dirs[len(layers)-1-n] = target // overlayfs lists the top layer first
	}
	return strings.Join(dirs, ":"), nil
}

// stackParts returns the parts of the root stack at src, or nil when src
// is a plain image.
func stackParts(src string) ([]rootstack.Part, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, fmt.Errorf("open root image: %w", err)
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd) // block devices too
	if err != nil {
		return nil, fmt.Errorf("root image %s: size: %w", src, err)
	}
	magic := make([]byte, len(rootstack.Magic))
	if _, err := f.ReadAt(magic, 0); err != nil {
		return nil, fmt.Errorf("read root image %s: %w", src, err)
	}
	if !rootstack.IsStack(magic) {
		return nil, nil
	}
	parts, err := rootstack.Read(f, size)
	if err != nil {
		return nil, fmt.Errorf("root image %s: %w", src, err)
	}
	return parts, nil
}

// mountRootImage mounts the read-only image in src at target: a block
// device directly, anything else (a file, or a part of a file or device at
// offset, size bytes long) through a read-only loop device.
func mountRootImage(src, target string, offset, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open root image: %w", err)
	}
	fstype, err := fsTypeAt(f, offset)
	f.Close()
	if err != nil {
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("root image: %w", err)
	}
	dev := src
	if fi.Mode().IsRegular() || size != 0 {
		if dev, err = attachLoop(src, offset, size); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(target, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", target, err)
	}
	if err := unix.Mount(dev, target, fstype, unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("mount %s root image %s (via %s) on %s: %w", fstype, src, dev, target, err)
	}
	return nil
}

// attachLoop attaches size bytes at offset of file (size 0: all of it)
// read-only to a free loop device and returns the device's path. The
// device detaches itself when its last user (the mount) goes away. The
// file descriptors stay open until the init executes the system's init
// (they are close-on-exec), by which time the mount holds the device.
func attachLoop(file string, offset, size int64) (string, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		return "", fmt.Errorf("open /dev/loop-control (is the loop module loaded?): %w", err)
	}
	defer ctl.Close()
	backing, err := os.Open(file)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", file, err)
	}
	var lastErr error
	// Another process may take the free device between asking and
	// attaching; the kernel then says EBUSY and we ask again.
	for attempt := 0; attempt < 10; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("LOOP_CTL_GET_FREE: %w", err)
		}
		dev := fmt.Sprintf("/dev/loop%d", n)
		loopFile, err := openWhenPresent(dev, 5*time.Second)
		if err != nil {
			return "", err
		}
		err = configureLoop(int(loopFile.Fd()), int(backing.Fd()), file, offset, size)
		if err == nil {
			keepOpen = append(keepOpen, loopFile, backing)
			return dev, nil
		}
		loopFile.Close()
		lastErr = err
		if !errors.Is(err, unix.EBUSY) {
			break
		}
	}
	backing.Close()
	return "", fmt.Errorf("attach %s to a loop device: %w", file, lastErr)
}

// keepOpen holds files that must stay open until exec.
var keepOpen []*os.File

func configureLoop(loopFD, backingFD int, name string, offset, size int64) error {
	info := unix.LoopInfo64{Flags: unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR, Offset: uint64(offset), Sizelimit: uint64(size)}
	copy(info.File_name[:len(info.File_name)-1], name)
	err := unix.IoctlLoopConfigure(loopFD, &unix.LoopConfig{Fd: uint32(backingFD), Info: info})
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOTTY) {
		return fmt.Errorf("LOOP_CONFIGURE: %w", err)
	}
	// Kernels before 5.8 lack LOOP_CONFIGURE.
	if err := unix.IoctlSetInt(loopFD, unix.LOOP_SET_FD, backingFD); err != nil {
		return fmt.Errorf("LOOP_SET_FD: %w", err)
	}
	if err := unix.IoctlLoopSetStatus64(loopFD, &info); err != nil {
		unix.IoctlSetInt(loopFD, unix.LOOP_CLR_FD, 0)
		return fmt.Errorf("LOOP_SET_STATUS64: %w", err)
	}
	return nil
}

// openWhenPresent opens a device node, waiting for devtmpfs to create it.
func openWhenPresent(dev string, wait time.Duration) (*os.File, error) {
	deadline := time.Now().Add(wait)
	for {
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) {
			f, err = os.Open(dev)
		}
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return nil, fmt.Errorf("open %s: %w", dev, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mountOverlay puts a tmpfs at overlayDir and the overlay of lower and that
// tmpfs at target.
func mountOverlay(lower, overlayDir, target string) error {
	if err := os.MkdirAll(overlayDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", overlayDir, err)
	}
	if err := unix.Mount("tmpfs", overlayDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs on %s: %w", overlayDir, err)
	}
	upper, work := filepath.Join(overlayDir, "upper"), filepath.Join(overlayDir, "work")
	for _, d := range []string{upper, work, target} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	// The upper directory's mode becomes that of the merged root.
	if err := os.Chmod(upper, 0o755); err != nil {
		return fmt.Errorf("chmod %s: %w", upper, err)
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := unix.Mount("overlay", target, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay (%s) on %s: %w", opts, target, err)
	}
	return nil
}
