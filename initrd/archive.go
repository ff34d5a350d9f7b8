// Package initrd builds the live initrd: a reproducible newc cpio archive
// (optionally compressed) holding the init binary, the kernel modules it
// loads and, for memory-mode boots, the read-only root image.
package initrd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// Archive collects the entries of a newc cpio archive. Entries are kept by
// path and written sorted, so the order in which they were added does not
// change the output. The zero value is not usable; call NewArchive.
type Archive struct {
	entries map[string]*entry
	// hostInodes maps a host file's (device, inode) to the archive path that
	// first added it, so host hardlinks stay hardlinks in the archive.
	hostInodes map[hostInode]string
}

type hostInode struct{ dev, ino uint64 }

type entryKind int

const (
	kindDir entryKind = iota
	kindFile
	kindSymlink
	kindCharDev
	kindBlockDev
	// kindHardlink is a further name of a regular file entry; linkTo names it.
	kindHardlink
)

type entry struct {
	kind     entryKind
	perm     fs.FileMode // permission bits incl. setuid/setgid/sticky (fs.Mode* form)
	uid, gid int

	data     []byte // kindFile from bytes
	hostPath string // kindFile from the host; read at write time
	size     int64  // kindFile size (checked again at write time for host files)

	target       string // kindSymlink target
	linkTo       string // kindHardlink: the path of the regular file it names
	major, minor uint32 // device numbers
	implicit     bool   // directory made up for a parent path
}

// NewArchive returns an empty archive.
func NewArchive() *Archive {
	return &Archive{entries: map[string]*entry{}, hostInodes: map[hostInode]string{}}
}

// cleanPath turns "/a/b/", "a/b" or "./a/b" into "a/b", the form cpio
// archives for the kernel use, and rejects paths leaving the root and
// names the kernel would read differently (checkKernelString).
func cleanPath(p string) (string, error) {
	c := path.Clean("/" + p)
	if c == "/" {
		return "", fmt.Errorf("initrd: path %q names the archive root", p)
	}
	if err := checkKernelString("path", c[1:]); err != nil {
		return "", err
	}
	return c[1:], nil
}

// kernelPathMax is the kernel initramfs unpacker's limit on names and
// symlink targets, the terminating NUL included (init/initramfs.c).
const kernelPathMax = 4096

// checkKernelString refuses what the kernel's unpacker reads as C strings
// and would take for another name: an embedded NUL ("init\x00x" unpacks
// as "init"), or more than PATH_MAX bytes (it stops unpacking).
func checkKernelString(what, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("initrd: %s %q contains a NUL byte", what, s)
	}
	if len(s)+1 > kernelPathMax {
		return fmt.Errorf("initrd: %s of %d bytes is longer than the kernel's %d", what, len(s), kernelPathMax-1)
	}
	return nil
}

func (a *Archive) add(p string, e *entry) error {
	name, err := cleanPath(p)
	if err != nil {
		return err
	}
	if old, ok := a.entries[name]; ok {
		// A directory may be declared explicitly after a child made it up.
		if old.kind == kindDir && e.kind == kindDir {
			if old.implicit || !e.implicit {
				*old = *e
			}
			return nil
		}
		return fmt.Errorf("initrd: %s added twice", name)
	}
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		parent, ok := a.entries[dir]
		if !ok {
			a.entries[dir] = &entry{kind: kindDir, perm: 0o755, implicit: true}
			continue
		}
		if parent.kind != kindDir {
			return fmt.Errorf("initrd: %s: parent %s is not a directory", name, dir)
		}
	}
	a.entries[name] = e
	return nil
}

// AddDir adds a directory. Missing parents are added with mode 0755.
func (a *Archive) AddDir(p string, perm fs.FileMode) error {
	return a.add(p, &entry{kind: kindDir, perm: perm})
}

// AddFile adds a regular file with the given contents.
func (a *Archive) AddFile(p string, perm fs.FileMode, data []byte) error {
	return a.add(p, &entry{kind: kindFile, perm: perm, data: data, size: int64(len(data))})
}

// AddHostFile adds a regular file whose contents are read from hostPath when
// the archive is written, so large files (the root image) are streamed, not
// held in memory. A host file already added under another name becomes a
// hardlink to it. hostPath's last component is resolved inside its
// directory, now and when written (fsroot.OpenPath): a build step's output
// holding a link to a file elsewhere (a signing key) does not put that
// file into the initrd.
func (a *Archive) AddHostFile(p string, perm fs.FileMode, hostPath string) error {
	f, err := fsroot.OpenPath(hostPath)
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	return a.addHostRegular(p, perm, hostPath, fi)
}

func (a *Archive) addHostRegular(p string, perm fs.FileMode, hostPath string, fi fs.FileInfo) error {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		key := hostInode{dev: uint64(st.Dev), ino: st.Ino}
		if first, seen := a.hostInodes[key]; seen {
			return a.AddHardlink(p, first)
		}
		name, err := cleanPath(p)
		if err != nil {
			return err
		}
		a.hostInodes[key] = name
	}
	return a.add(p, &entry{kind: kindFile, perm: perm, hostPath: hostPath, size: fi.Size()})
}

// AddSymlink adds a symbolic link pointing at target.
func (a *Archive) AddSymlink(p, target string) error {
	if target == "" {
		return fmt.Errorf("initrd: symlink %s has an empty target", p)
	}
	if err := checkKernelString("symlink target", target); err != nil {
		return err
	}
	return a.add(p, &entry{kind: kindSymlink, perm: 0o777, target: target})
}

// AddCharDevice adds a character device node, e.g. /dev/console (5, 1).
func (a *Archive) AddCharDevice(p string, perm fs.FileMode, major, minor uint32) error {
	return a.add(p, &entry{kind: kindCharDev, perm: perm, major: major, minor: minor})
}

// AddBlockDevice adds a block device node.
func (a *Archive) AddBlockDevice(p string, perm fs.FileMode, major, minor uint32) error {
	return a.add(p, &entry{kind: kindBlockDev, perm: perm, major: major, minor: minor})
}

// AddHardlink adds p as another name of the regular file existing, which must
// be added (before or after) by the time the archive is written.
func (a *Archive) AddHardlink(p, existing string) error {
	target, err := cleanPath(existing)
	if err != nil {
		return err
	}
	return a.add(p, &entry{kind: kindHardlink, linkTo: target})
}

// SetOwner sets the owner of an entry; entries are owned by 0:0 otherwise.
func (a *Archive) SetOwner(p string, uid, gid int) error {
	name, err := cleanPath(p)
	if err != nil {
		return err
	}
	e, ok := a.entries[name]
	if !ok {
		return fmt.Errorf("initrd: SetOwner: %s not in archive", name)
	}
	if e.kind == kindHardlink {
		return fmt.Errorf("initrd: SetOwner: %s is a hardlink; set the owner of %s", name, e.linkTo)
	}
	e.uid, e.gid = uid, gid
	return nil
}

// AddTree adds the contents of hostDir below prefix ("" or "/" for the
// archive root). Modes, symlinks, device nodes and hardlinks are kept;
// owners are not (everything is root's: the initrd is built unprivileged
// from trees that may belong to anyone). Sockets are skipped.
func (a *Archive) AddTree(hostDir, prefix string) error {
	return filepath.WalkDir(hostDir, func(hostPath string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("initrd: walk: %w", err)
		}
		rel, err := filepath.Rel(hostDir, hostPath)
		if err != nil {
			return fmt.Errorf("initrd: %w", err)
		}
		if rel == "." {
			if prefix == "" || path.Clean("/"+prefix) == "/" {
				return nil
			}
			rel = ""
		}
		p := path.Join("/", prefix, filepath.ToSlash(rel))
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("initrd: %w", err)
		}
		perm := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch m := fi.Mode(); {
		case m.IsDir():
			return a.AddDir(p, perm)
		case m.IsRegular():
			return a.addHostRegular(p, perm, hostPath, fi)
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(hostPath)
			if err != nil {
				return fmt.Errorf("initrd: %w", err)
			}
			return a.AddSymlink(p, target)
		case m&fs.ModeDevice != 0:
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				return fmt.Errorf("initrd: %s: no device numbers", hostPath)
			}
			major, minor := devMajor(uint64(st.Rdev)), devMinor(uint64(st.Rdev))
			if m&fs.ModeCharDevice != 0 {
				return a.AddCharDevice(p, perm, major, minor)
			}
			return a.AddBlockDevice(p, perm, major, minor)
		case m&fs.ModeSocket != 0:
			return nil
		default:
			return fmt.Errorf("initrd: %s: unsupported file type %v", hostPath, m.Type())
		}
	})
}

// Linux's dev_t encoding (glibc's gnu_dev_major/minor).
func devMajor(dev uint64) uint32 { return uint32((dev>>8)&0xfff | (dev>>32)&^0xfff) }
func devMinor(dev uint64) uint32 { return uint32(dev&0xff | (dev>>12)&^0xff) }

// sortedNames returns the entry paths in byte order. Plain byte order puts a
// directory before everything below it, because a path sorts before any
// longer path it prefixes; the kernel needs parents first.
func (a *Archive) sortedNames() []string {
	names := make([]string, 0, len(a.entries))
	for n := range a.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

var errNoEntries = errors.New("initrd: archive is empty")
