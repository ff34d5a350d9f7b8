// Package fsroot works on a directory tree as if it were / : an OS image
// being built. Every path is resolved by the kernel against the tree's
// directory fd with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS), so an
// absolute symlink (/var/run -> /run) or a ".." lands inside the tree, the
// way it would inside a chroot, and nothing the tree holds can make an
// operation touch the host. Operations that change a path's last component
// (create, remove, symlink, rename) resolve its parent that way and then act
// on the name with *at system calls; they never follow a final symlink.
//
// Go's os.Root refuses symlinks that leave the root instead of resolving
// them inside it, which would reject every Debian tree (/var/run -> /run).
package fsroot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// resolve is how every path inside a Root is looked up.
const resolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// Root is an open directory tree in which paths resolve as in a chroot.
// Names are slash-separated; a leading "/" is the tree's top.
type Root struct {
	fd   int
	path string
}

// Open opens dir as a Root.
func Open(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open root", Path: dir, Err: err}
	}
	r := &Root{fd: fd, path: dir}
	probe, err := r.openat2(".", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		unix.Close(fd)
		if err == unix.ENOSYS {
			err = fmt.Errorf("%w: the build host's kernel lacks openat2 (Linux 5.6 or later needed)", err)
		}
		return nil, &fs.PathError{Op: "open root", Path: dir, Err: err}
	}
	unix.Close(probe)
	return r, nil
}

// Close releases the directory fd.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Path is the tree's host path, for tools that confine themselves to a
// root (chroot, systemd-sysusers --root, mksquashfs).
func (r *Root) Path() string { return r.path }

func (r *Root) errorf(op, name string, err error) error {
	return &fs.PathError{Op: op, Path: r.path + ":" + display(name), Err: err}
}

// display is name as seen inside the tree.
func display(name string) string { return "/" + strings.TrimLeft(name, "/") }

// openat2 resolves name inside the tree; EAGAIN and EINTR (a concurrent
// rename during ".." resolution, a signal) are retried.
func (r *Root) openat2(name string, flags uint64, mode uint32) (int, error) {
	if name = strings.TrimLeft(name, "/"); name == "" {
		name = "."
	}
	how := unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: uint64(mode), Resolve: resolve}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(r.fd, name, &how)
		if (err == unix.EAGAIN || err == unix.EINTR) && i < 64 {
			continue
		}
		return fd, err
	}
}

// errFinal is returned for operations on a last component that names no
// entry of its own: "/", "." or "..".
var errFinal = errors.New("path names no directory entry")

// parent opens the directory holding name's last component, resolved
// inside the tree, and returns it with that component.
func (r *Root) parent(op, name string) (int, string, error) {
	trimmed := strings.TrimRight(name, "/")
	dir, base := ".", trimmed
	if i := strings.LastIndexByte(trimmed, '/'); i >= 0 {
		dir, base = trimmed[:i], trimmed[i+1:]
	}
	if base == "" || base == "." || base == ".." {
		return -1, "", r.errorf(op, name, errFinal)
	}
	fd, err := r.openat2(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", r.errorf(op, name, err)
	}
	return fd, base, nil
}

// Open opens the regular file or directory name for reading, following
// symlinks inside the tree. Devices and FIFOs are refused before they are
// opened: the type is checked on an O_PATH fd, which runs no driver's open
// (a watchdog's starts its timer) and does not block on a FIFO, and only
// then is that same inode opened for reading, through its /proc/self/fd
// entry. A tree's data never comes from a device.
func (r *Root) Open(name string) (*os.File, error) {
	pfd, err := r.openat2(name, unix.O_PATH, 0)
	if err != nil {
		return nil, r.errorf("open", name, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, r.errorf("open", name, err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		return nil, r.errorf("open", name, fmt.Errorf("not a regular file or directory (mode %#o)", st.Mode))
	}
	// The magic link names the checked inode, whatever the tree's paths
	// say by now; an inode's type never changes.
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, r.errorf("open", name, err)
	}
	return os.NewFile(uintptr(fd), r.path+":"+display(name)), nil
}

// ReadFile reads the regular file name, refusing one larger than limit
// before reading it.
func (r *Root) ReadFile(name string, limit int64) ([]byte, error) {
	f, err := r.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, r.errorf("read", name, fmt.Errorf("not a regular file (%s)", fi.Mode().Type()))
	}
	if fi.Size() > limit {
		return nil, r.errorf("read", name, fmt.Errorf("%d bytes, more than the %d allowed", fi.Size(), limit))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("grew beyond %d bytes while read", limit)
	}
	if err != nil {
		return nil, r.errorf("read", name, err)
	}
	return b, nil
}

// stat opens name as an O_PATH fd (following a final symlink or not) and
// fstats it.
func (r *Root) stat(op, name string, flags uint64) (fs.FileInfo, error) {
	fd, err := r.openat2(name, unix.O_PATH|flags, 0)
	if err != nil {
		return nil, r.errorf(op, name, err)
	}
	f := os.NewFile(uintptr(fd), path.Base(display(name)))
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, r.errorf(op, name, err)
	}
	return fi, nil
}

// Stat describes name, following symlinks inside the tree.
func (r *Root) Stat(name string) (fs.FileInfo, error) { return r.stat("stat", name, 0) }

// Lstat describes name itself, a symlink not followed.
func (r *Root) Lstat(name string) (fs.FileInfo, error) {
	return r.stat("lstat", name, unix.O_NOFOLLOW)
}

// Readlink returns the target of the symlink name, as written.
func (r *Root) Readlink(name string) (string, error) {
	fd, err := r.openat2(name, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", r.errorf("readlink", name, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", r.errorf("readlink", name, err)
	}
	return string(buf[:n]), nil
}

// ReadDirNames lists the directory name (symlinks followed inside the
// tree), sorted. Names only: an fs.DirEntry from os would stat by host path.
func (r *Root) ReadDirNames(name string) ([]string, error) {
	fd, err := r.openat2(name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, r.errorf("readdir", name, err)
	}
	f := os.NewFile(uintptr(fd), display(name))
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, r.errorf("readdir", name, err)
	}
	slices.Sort(names)
	return names, nil
}

// Mkdir creates the directory name.
func (r *Root) Mkdir(name string, perm fs.FileMode) error {
	dfd, base, err := r.parent("mkdir", name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Mkdirat(dfd, base, unixMode(perm)); err != nil {
		return r.errorf("mkdir", name, err)
	}
	return nil
}

// MkdirAll creates name and its missing parents, like mkdir -p in a
// chroot: existing components, symlinks among them, are followed inside
// the tree.
func (r *Root) MkdirAll(name string, perm fs.FileMode) error {
	parts := strings.Split(strings.Trim(name, "/"), "/")
	for i := range parts {
		if parts[i] == "" || parts[i] == "." || parts[i] == ".." {
			continue
		}
		prefix := strings.Join(parts[:i+1], "/")
		fd, err := r.openat2(prefix, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if err != unix.ENOENT {
			return r.errorf("mkdir", prefix, err)
		}
		if err := r.Mkdir(prefix, perm); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		// Created, raced or a dangling symlink: the component must now
		// be a directory.
		fd, err = r.openat2(prefix, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return r.errorf("mkdir", prefix, err)
		}
		unix.Close(fd)
	}
	return nil
}

// Remove removes the file, symlink or empty directory name.
func (r *Root) Remove(name string) error {
	dfd, base, err := r.parent("remove", name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	err = unix.Unlinkat(dfd, base, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return r.errorf("remove", name, err)
	}
	return nil
}

// RemoveAll removes name and, if it is a directory (not a symlink to one),
// everything below it. A missing name is not an error.
func (r *Root) RemoveAll(name string) error {
	dfd, base, err := r.parent("remove", name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer unix.Close(dfd)
	if err := removeAllAt(dfd, base); err != nil {
		return r.errorf("remove", name, err)
	}
	return nil
}

// removeAllAt removes base in the directory dfd. Below it only names read
// from the directories themselves are used, relative to their fds: no path
// is resolved, so no symlink is followed.
func removeAllAt(dfd int, base string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(dfd, base, 0)
	}
	fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), base)
	names, err := f.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAllAt(fd, n); err != nil {
				break
			}
		}
	}
	f.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(dfd, base, unix.AT_REMOVEDIR)
}

// Symlink creates name as a symlink to target. The target is stored as
// given; it is resolved inside the tree whenever the tree is used.
func (r *Root) Symlink(target, name string) error {
	dfd, base, err := r.parent("symlink", name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Symlinkat(target, dfd, base); err != nil {
		return r.errorf("symlink", name, err)
	}
	return nil
}

// Rename moves oldname to newname within the tree, replacing newname.
func (r *Root) Rename(oldname, newname string) error {
	ofd, obase, err := r.parent("rename", oldname)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	nfd, nbase, err := r.parent("rename", newname)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	if err := unix.Renameat(ofd, obase, nfd, nbase); err != nil {
		return r.errorf("rename", oldname+" -> "+display(newname), err)
	}
	return nil
}

var tmpSeq atomic.Uint64

// WriteFile writes what src holds to name with mode perm (setuid, setgid
// and sticky bits included), replacing a file or symlink there in one
// rename: a symlink at name is replaced, never written through.
func (r *Root) WriteFile(name string, src io.Reader, perm fs.FileMode) error {
	dfd, base, err := r.parent("write", name)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	tmp := ".osb-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(tmpSeq.Add(1), 10)
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return r.errorf("write", name, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = io.Copy(f, src)
	if err == nil {
		// fchmod: the umask does not apply, special bits survive.
		err = unix.Fchmod(fd, unixMode(perm))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, base)
	}
	if err != nil {
		unix.Unlinkat(dfd, tmp, 0)
		return r.errorf("write", name, err)
	}
	return nil
}

// Chmod sets name's mode, following symlinks inside the tree.
func (r *Root) Chmod(name string, mode fs.FileMode) error {
	fd, err := r.openat2(name, unix.O_PATH, 0)
	if err != nil {
		return r.errorf("chmod", name, err)
	}
	defer unix.Close(fd)
	// An O_PATH fd cannot be fchmod'ed; its /proc/self/fd entry names
	// exactly that inode (fchmodat2 with AT_EMPTY_PATH needs Linux 6.6).
	if err := unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unixMode(mode), 0); err != nil {
		return r.errorf("chmod", name, err)
	}
	return nil
}

// Chown sets name's owner and group, following symlinks inside the tree.
func (r *Root) Chown(name string, uid, gid int) error { return r.chown("chown", name, uid, gid, 0) }

// Lchown sets the owner and group of name itself, a symlink not followed.
func (r *Root) Lchown(name string, uid, gid int) error {
	return r.chown("lchown", name, uid, gid, unix.O_NOFOLLOW)
}

func (r *Root) chown(op, name string, uid, gid int, flags uint64) error {
	fd, err := r.openat2(name, unix.O_PATH|flags, 0)
	if err != nil {
		return r.errorf(op, name, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchownat(fd, "", uid, gid, unix.AT_EMPTY_PATH); err != nil {
		return r.errorf(op, name, err)
	}
	return nil
}

// Glob returns the names matching pattern (path.Match syntax per
// component, absolute inside the tree), sorted, like filepath.Glob: a
// directory that cannot be read contributes nothing.
func (r *Root) Glob(pattern string) ([]string, error) {
	parts := strings.Split(strings.Trim(pattern, "/"), "/")
	for _, p := range parts {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("glob %q: %w", pattern, err)
		}
	}
	var out []string
	var walk func(dir string, rest []string)
	walk = func(dir string, rest []string) {
		if len(rest) == 0 {
			out = append(out, dir)
			return
		}
		p := rest[0]
		if !strings.ContainsAny(p, `*?[\`) {
			next := path.Join(dir, p)
			if len(rest) == 1 {
				if _, err := r.Lstat(next); err != nil {
					return
				}
			}
			walk(next, rest[1:])
			return
		}
		names, err := r.ReadDirNames(dir)
		if err != nil {
			return
		}
		for _, n := range names {
			if ok, _ := path.Match(p, n); ok {
				walk(path.Join(dir, n), rest[1:])
			}
		}
	}
	walk("/", parts)
	slices.Sort(out)
	return out, nil
}

// unixMode turns an fs.FileMode into mode_t bits.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= unix.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		u |= unix.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		u |= unix.S_ISVTX
	}
	return u
}
