package pid1

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/initrd/disk"
	"github.com/ironcore-dev/os-builder/initrd/gpt"
)

// Persistent paths: the data partition (osb.data, default partlabel:osb-data,
// ext4) is mounted at DataDir, and each osb.persist path P is bind-mounted
// from DataDir/persist/P over the overlay root. The first boot seeds
// DataDir/persist/P with the image's P, so /etc/ssh etc. start out as the
// image has them. On disk boots the disk is first fitted (grow.go); without
// a data partition the paths go on a tmpfs at DataDir, with a warning.

const (
	// DataDir is where the data partition is mounted; under /run, so it
	// moves into the final root.
	DataDir = "/run/osb/data"
	// persistSubdir holds the persisted trees on the data partition.
	persistSubdir = "persist"
	mib           = 1 << 20
)

// mke2fsPaths are where the initrd may carry mke2fs (see
// initrd.AssembleOptions.Files).
var mke2fsPaths = []string{"/usr/sbin/mke2fs", "/sbin/mke2fs"}

// DataWait is how long the init looks for an existing data partition when
// it does not boot from disk (on disk boots the root's disk is already
// there and scanned).
var DataWait = 5 * time.Second

// setupPersist mounts the data partition and bind-mounts the persisted
// paths into sysroot. rootDev is the root partition's device on disk boots,
// "" otherwise: only then is the disk fitted (backup GPT at the end,
// osb-data grown, fitDisk) and may a missing data partition be created.
// When there is no data partition and none can be made, the paths go on a
// tmpfs with a loud warning, or the boot stops when cfg.PersistRequired.
func (i *initProcess) setupPersist(cfg *Config, rootDev, sysroot string) error {
	wait := DataWait
	defaultData := cfg.Data.Kind == disk.ByPartLabel && cfg.Data.Value == disk.PartLabelData
	if rootDev != "" {
		wait = 0 // the boot disk has been scanned already
		if defaultData {
			// Not fatal: the disk then boots as it is, only smaller.
			if err := i.fitDisk(rootDev); err != nil {
				i.warnf("WARNING: persist: could not fit the partition table to the disk: %v", err)
			}
		}
	}
	dev, err := disk.WaitForBlockDevice(cfg.Data, wait)
	if err != nil {
		dev = ""
		i.debugf("persist: %v", err)
	}
	if dev == "" && len(cfg.Persist) == 0 {
		return nil // nothing asked for, nothing there
	}
	if dev == "" {
		var why error
		if rootDev == "" || !defaultData {
			why = fmt.Errorf("no data partition %s", cfg.Data)
		} else if dev, err = i.createDataPartition(rootDev); err != nil {
			why = err
		}
		if why != nil {
			if cfg.PersistRequired {
				return fmt.Errorf("persist: %w; the image requires persistence (osb.persist.required=1)", why)
			}
			return i.persistInRAM(cfg, sysroot, why)
		}
	}
	if err := os.MkdirAll(DataDir, 0o755); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	if err := unix.Mount(dev, DataDir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("persist: mount data partition %s (%s) as ext4 on %s: %w", dev, cfg.Data, DataDir, err)
	}
	i.logf("persist: data partition %s mounted on %s", dev, DataDir)
	if err := i.growFilesystem(dev, DataDir); err != nil {
		i.warnf("WARNING: persist: could not grow the file system on %s: %v", dev, err)
	}
	return i.bindAll(cfg, sysroot)
}

// bindAll bind-mounts every persisted path from DataDir into sysroot.
func (i *initProcess) bindAll(cfg *Config, sysroot string) error {
	for _, p := range cfg.Persist {
		if err := bindPersisted(filepath.Join(DataDir, persistSubdir), sysroot, p); err != nil {
			return fmt.Errorf("persist %s: %w", p, err)
		}
		i.logf("persist: %s", p)
	}
	return nil
}

// persistInRAM puts a tmpfs where the data partition would be mounted and
// binds the persisted paths from it as usual (seeded from the image), so
// the OS sees the same mounts; what is written there is lost at shutdown.
func (i *initProcess) persistInRAM(cfg *Config, sysroot string, why error) error {
	i.warnf("WARNING: persist: %v", why)
	i.warnf("WARNING: persist: %s are on tmpfs this boot: changes are LOST at shutdown (recipe persistRequired / osb.persist.required=1 stops the boot instead)", strings.Join(cfg.Persist, ", "))
	if err := os.MkdirAll(DataDir, 0o755); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	if err := unix.Mount("osb-data-tmpfs", DataDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return fmt.Errorf("persist: mount a tmpfs on %s: %w", DataDir, err)
	}
	return i.bindAll(cfg, sysroot)
}

// warnf prints a warning on the console and puts it in the kernel log with
// warning priority, where journald picks it up (journalctl -k -p warning).
func (i *initProcess) warnf(format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	i.logf("%s", msg)
	if k, err := os.OpenFile("/dev/kmsg", os.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
		k.WriteString("<4>" + logPrefix + msg)
		k.Close()
	}
}

// bindPersisted bind-mounts store/p over sysroot/p, first seeding store/p
// from sysroot/p when it does not exist yet.
func bindPersisted(store, sysroot, p string) error {
	src := filepath.Join(store, p)
	dst := filepath.Join(sysroot, p)
	if _, err := os.Lstat(src); errors.Is(err, os.ErrNotExist) {
		if err := seed(dst, src); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	// The mount point must exist in the overlay and be of the same kind.
	if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		if fi.IsDir() {
			err = os.MkdirAll(dst, fi.Mode().Perm())
		} else {
			if err = os.MkdirAll(filepath.Dir(dst), 0o755); err == nil {
				err = os.WriteFile(dst, nil, 0o644)
			}
		}
		if err != nil {
			return fmt.Errorf("create mount point: %w", err)
		}
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount %s on %s: %w", src, dst, err)
	}
	return nil
}

// seed copies the image's from (a directory, file or nothing) to to, via a
// temporary name so an interrupted seed is redone at the next boot.
func seed(from, to string) error {
	tmp := to + ".osb-seeding"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	fi, err := os.Lstat(from)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// Not in the image: start with an empty directory.
		if err := os.Mkdir(tmp, 0o755); err != nil {
			return err
		}
	case err != nil:
		return err
	case fi.IsDir() || fi.Mode().IsRegular():
		if err := copyTree(from, tmp); err != nil {
			return fmt.Errorf("seed from the image: %w", err)
		}
	default:
		return fmt.Errorf("%s in the image is neither a directory nor a file", from)
	}
	if err := syncPath(filepath.Dir(to)); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}

func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// copyTree copies files, directories and symlinks with their modes, owners
// and times. Other file types (devices, sockets) are skipped.
func copyTree(src, dst string) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		return err
	}
	mode := os.FileMode(st.Mode & 0o7777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
	case unix.S_IFREG:
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(target, dst); err != nil {
			return err
		}
		if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
		return nil
	default:
		return nil
	}
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if err := os.Chmod(dst, mode); err != nil { // after chown, which clears set-id bits
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// createDataPartition adds osb-data to the disk holding rootDev, formats it
// with mke2fs and returns its device.
func (i *initProcess) createDataPartition(rootDev string) (string, error) {
	mke2fs := ""
	for _, p := range mke2fsPaths {
		if _, err := os.Stat(p); err == nil {
			mke2fs = p
			break
		}
	}
	if mke2fs == "" {
		return "", fmt.Errorf("the disk has no %s partition, and the initrd has no mke2fs to format a new one (build the initrd with mke2fs: initrd.AssembleOptions.Files)", disk.PartLabelData)
	}
	diskDev, err := disk.OfPartition(rootDev)
	if err != nil {
		return "", err
	}
	f, ss, size, err := disk.Open(diskDev, os.O_RDWR)
	if err != nil {
		return "", err
	}
	defer f.Close()
	t, err := gpt.Read(f, ss, size)
	if err != nil {
		return "", fmt.Errorf("read the GPT of %s: %w", diskDev, err)
	}
	root := t.ByName(disk.PartLabelRoot)
	if root == nil {
		return "", fmt.Errorf("%s has no %s partition", diskDev, disk.PartLabelRoot)
	}
	var end int64 // the end of the last partition
	used := map[int]bool{}
	for _, p := range t.Partitions {
		_, e := p.ByteRange(ss)
		end = max(end, e)
		used[p.Index] = true
	}
	_, lastUsable := t.Usable(size)
	usableEnd := int64(lastUsable+1) * int64(ss) / mib * mib
	start, err := disk.DataPartitionStart(end, usableEnd)
	if err != nil {
		return "", fmt.Errorf("%s: %w", diskDev, err)
	}
	idx := 3
	for used[idx] {
		idx++
	}
	var g gpt.GUID
	if _, err := rand.Read(g[:]); err != nil {
		return "", err
	}
	g[7] = g[7]&0x0f | 0x40 // version 4 (field 3 is little endian on disk)
	g[8] = g[8]&0x3f | 0x80
	p := gpt.Partition{
		Index: idx, Type: gpt.MustGUID(gpt.TypeLinuxVar), GUID: g, Name: disk.PartLabelData,
		FirstLBA: uint64(start / int64(ss)), LastLBA: uint64(usableEnd/int64(ss)) - 1,
	}
	t.Partitions = append(t.Partitions, p)
	i.logf("persist: creating %s on %s: partition %d, %d MiB at byte %d", disk.PartLabelData, diskDev, idx, (usableEnd-start)/mib, start)
	if err := disk.WriteTable(f, t, size, true); err != nil {
		return "", err
	}
	if err := disk.AddKernelPartition(f, idx, start, usableEnd-start); err != nil {
		return "", err
	}
	dev := disk.PartitionDevice(filepath.Base(diskDev), idx)
	pf, err := openWhenPresent(dev, 10*time.Second)
	if err != nil {
		return "", err
	}
	pf.Close()
	i.logf("persist: formatting %s (ext4, label %s)", dev, disk.PartLabelData)
	cmd := exec.Command(mke2fs, "-q", "-F", "-t", "ext4", "-L", disk.PartLabelData, "-E", "nodiscard", dev)
	cmd.Env = []string{"PATH=/usr/sbin:/sbin:/usr/bin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", mke2fs, dev, err, strings.TrimSpace(string(out)))
	}
	return dev, nil
}
