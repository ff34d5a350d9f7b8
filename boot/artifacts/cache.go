package artifacts

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// DefaultCacheDir is where blobs are cached unless the caller says
// otherwise: $XDG_CACHE_HOME/os-builder/artifacts, else
// ~/.cache/os-builder/artifacts, else (no home) under $XDG_RUNTIME_DIR or
// /run/user/UID. Never a shared path such as /tmp: anyone could plant a
// blob there before the server starts.
func DefaultCacheDir() (string, error) {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "os-builder", "artifacts"), nil
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		rt = fmt.Sprintf("/run/user/%d", os.Geteuid())
	}
	if !filepath.IsAbs(rt) {
		return "", fmt.Errorf("no cache directory: $HOME is unset and $XDG_RUNTIME_DIR %q is not absolute", rt)
	}
	return filepath.Join(rt, "os-builder", "artifacts"), nil
}

// errCache marks failures of the local cache (as opposed to the source).
var errCache = errors.New("artifact cache")

// errNotRegular: something other than a regular file (a symlink, a FIFO,
// a directory) sits where a blob belongs.
var errNotRegular = errors.New("not a regular file")

// blobCache is a private directory of blobs, <dir>/sha256/<hex>. Every
// operation is relative to the opened sha256 directory and never follows
// a symlink, so a swapped path cannot redirect it.
type blobCache struct {
	dir  string
	top  *os.File // <dir>, O_DIRECTORY|O_NOFOLLOW
	blob *os.File // <dir>/sha256, O_DIRECTORY|O_NOFOLLOW
}

// openCache creates dir (0700) if needed and refuses it unless it is a
// real directory owned by the effective uid without group/other access:
// only then can nobody else plant or swap blobs in it.
func openCache(dir string) (*blobCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w %s: %w", errCache, dir, err)
	}
	top, err := openPrivateDir(unix.AT_FDCWD, dir, dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Mkdirat(int(top.Fd()), "sha256", 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		top.Close()
		return nil, fmt.Errorf("%w %s: creating sha256: %w", errCache, dir, err)
	}
	blob, err := openPrivateDir(int(top.Fd()), "sha256", filepath.Join(dir, "sha256"))
	if err != nil {
		top.Close()
		return nil, err
	}
	return &blobCache{dir: dir, top: top, blob: blob}, nil
}

// bootKeyFile holds the key boot tokens are made with (see Server.BootURL).
const (
	bootKeyFile = "boot-token.key"
	bootKeySize = 32
)

// bootKey returns the cache directory's boot token key, creating it (0600,
// random) on first use. It lives in the private directory, so only this
// uid can read it, and it persists, so a restarted server makes the same
// tokens.
func (c *blobCache) bootKey() ([]byte, error) {
	shown := filepath.Join(c.dir, bootKeyFile)
	for range 2 {
		fd, err := unix.Openat(int(c.top.Fd()), bootKeyFile, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err == nil {
			f := os.NewFile(uintptr(fd), shown)
			defer f.Close()
			fi, err := f.Stat()
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", errCache, shown, err)
			}
			if !fi.Mode().IsRegular() || fi.Size() != bootKeySize {
				return nil, fmt.Errorf("%w: %s: not a %d-byte regular file; remove it", errCache, shown, bootKeySize)
			}
			key := make([]byte, bootKeySize)
			if _, err := io.ReadFull(f, key); err != nil {
				return nil, fmt.Errorf("%w: reading %s: %w", errCache, shown, err)
			}
			return key, nil
		}
		if !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("%w: %w", errCache, &fs.PathError{Op: "open", Path: shown, Err: err})
		}
		if err := c.createBootKey(shown); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, err
		}
		// Created here or by a concurrent server: read it.
	}
	return nil, fmt.Errorf("%w: %s keeps disappearing", errCache, shown)
}

// createBootKey writes a new random key aside and links it into place, so
// no reader sees a partial key; fs.ErrExist when another server was first.
func (c *blobCache) createBootKey(shown string) error {
	key := make([]byte, bootKeySize)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".key-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(int(c.top.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: creating %s: %w", errCache, shown, err)
	}
	defer unix.Unlinkat(int(c.top.Fd()), tmp, 0)
	f := os.NewFile(uintptr(fd), shown)
	_, err = f.Write(key)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: writing %s: %w", errCache, shown, err)
	}
	if err := unix.Linkat(int(c.top.Fd()), tmp, int(c.top.Fd()), bootKeyFile, 0); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fs.ErrExist
		}
		return fmt.Errorf("%w: creating %s: %w", errCache, shown, err)
	}
	return nil
}

func openPrivateDir(at int, name, shown string) (*os.File, error) {
	fd, err := unix.Openat(at, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return nil, fmt.Errorf("%w %s: is a symlink or not a directory; refusing it", errCache, shown)
	}
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", errCache, shown, err)
	}
	f := os.NewFile(uintptr(fd), shown)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("%w %s: %w", errCache, shown, err)
	}
	if uid := uint32(os.Geteuid()); st.Uid != uid {
		f.Close()
		return nil, fmt.Errorf("%w %s: owned by uid %d, not by this process's uid %d; refusing it (use a directory of your own)", errCache, shown, st.Uid, uid)
	}
	if perm := st.Mode & 0o777; perm&0o077 != 0 {
		f.Close()
		return nil, fmt.Errorf("%w %s: mode %#o gives group/other access; refusing it (chmod 700, or use another directory)", errCache, shown, perm)
	}
	return f, nil
}

func (c *blobCache) path(hexDigest string) string { return filepath.Join(c.dir, "sha256", hexDigest) }

// open opens a cached blob without following symlinks; it must be a
// regular file. A missing blob is fs.ErrNotExist.
func (c *blobCache) open(hexDigest string) (*os.File, error) {
	// O_NONBLOCK: opening a planted FIFO must not hang the server.
	fd, err := unix.Openat(int(c.blob.Fd()), hexDigest, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil, fs.ErrNotExist
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("%s is a symlink: %w", c.path(hexDigest), errNotRegular)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", errCache, &fs.PathError{Op: "open", Path: c.path(hexDigest), Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s: %w", errCache, c.path(hexDigest), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s (mode %#o): %w", c.path(hexDigest), st.Mode, errNotRegular)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s: %w", errCache, c.path(hexDigest), err)
	}
	return os.NewFile(uintptr(fd), c.path(hexDigest)), nil
}

// verify reports whether the cached blob hashes to hexDigest, its actual
// sha256 and its size.
func (c *blobCache) verify(hexDigest string) (bool, string, int64, error) {
	f, err := c.open(hexDigest)
	if err != nil {
		return false, "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return false, "", 0, fmt.Errorf("%w: hashing %s: %w", errCache, f.Name(), err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	return got == hexDigest, got, n, nil
}

// create opens a new private temp file next to the blobs.
func (c *blobCache) create() (*os.File, string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := ".fetch-" + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(int(c.blob.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, "", fmt.Errorf("%w: creating %s: %w", errCache, filepath.Join(c.dir, "sha256", name), err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(c.dir, "sha256", name)), name, nil
}

// commit renames a verified temp file onto the blob's name, replacing
// whatever was there (a symlink is replaced, not followed).
func (c *blobCache) commit(tmpName, hexDigest string) error {
	if err := unix.Renameat(int(c.blob.Fd()), tmpName, int(c.blob.Fd()), hexDigest); err != nil {
		return fmt.Errorf("%w: caching %s: %w", errCache, c.path(hexDigest), err)
	}
	return nil
}

func (c *blobCache) remove(name string) { _ = unix.Unlinkat(int(c.blob.Fd()), name, 0) }

// close releases the directory handles.
func (c *blobCache) close() {
	c.blob.Close()
	c.top.Close()
}
