package pid1

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// movedMounts are moved into the new root before switching.
var movedMounts = []string{"/dev", "/proc", "/sys", "/run"}

// switchRoot makes newRoot the root file system and executes init in it,
// like util-linux's switch_root: move the API mounts over, delete the
// initramfs's files (they would otherwise pin RAM for good), move newRoot
// onto /, chroot into it and exec.
func switchRoot(newRoot, init string, args []string) error {
	for _, m := range movedMounts {
		target := filepath.Join(newRoot, m)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", target, err)
		}
		if err := unix.Mount(m, target, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("move mount %s to %s: %w", m, target, err)
		}
	}
	if err := unix.Chdir(newRoot); err != nil {
		return fmt.Errorf("chdir %s: %w", newRoot, err)
	}
	// Check before deleting anything, so a root without init still leaves
	// the initramfs intact for debugging.
	if err := existsInRoot(newRoot, init); err != nil {
		return fmt.Errorf("the new root has no %s: %w", init, err)
	}
	var rootStat unix.Stat_t
	if err := unix.Lstat("/", &rootStat); err != nil {
		return fmt.Errorf("stat /: %w", err)
	}
	removeSameDevice("/", rootStat.Dev)
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("move %s to /: %w", newRoot, err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("chroot %s: %w", newRoot, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir / after chroot: %w", err)
	}
	argv := append([]string{init}, args...)
	if err := unix.Exec(init, argv, os.Environ()); err != nil {
		return fmt.Errorf("exec %s: %w", init, err)
	}
	return nil
}

// removeSameDevice deletes what is below dir on device dev, leaving other
// file systems (mount points) alone. Errors are ignored: what cannot be
// deleted only costs memory.
func removeSameDevice(dir string, dev uint64) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil || st.Dev != dev {
			continue
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			removeSameDevice(p, dev)
			unix.Rmdir(p)
			continue
		}
		unix.Unlink(p)
	}
}

// existsInRoot checks that p exists in root, resolving symlinks as if root
// were / (/sbin/init is usually an absolute symlink to systemd, which a
// plain stat would look up in the initramfs).
func existsInRoot(root, p string) error {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat2(dir, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT,
	})
	if errors.Is(err, unix.ENOSYS) {
		return nil // kernels before 5.6: exec will tell
	}
	if err != nil {
		return err
	}
	return unix.Close(fd)
}
