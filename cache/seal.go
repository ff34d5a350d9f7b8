package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ironcore-dev/os-builder/internal/filehash"
)

// The seal is the list of an entry's files written into its meta file. Lookup
// checks the entry against it with one lstat per file (set of paths, types,
// modes, sizes, mtimes, and each regular file's device, inode and ctime),
// which stays cheap for multi-GB entries: a truncated, extended, rewritten,
// added or missing file is a miss. The ctime catches a same-size rewrite
// that puts the mtime back: user space can set an mtime, not a ctime. A
// file whose identity changed while size and mtime did not (a cache copied
// with cp -a or restored from an archive, a seal from before identities)
// is hashed against the sha256 recorded at fill time: a match is a hit
// and the entry is sealed anew, so only the first lookup pays; a mismatch
// is a miss. Verify rehashes every file.
const sealFormat = 2

// sealFormatNoIdentity is the seal before identities: still trusted, by
// hashing each file once (see above). Cache keys are not part of the seal:
// entries keep their keys.
const sealFormatNoIdentity = 1

// hashSealed hashes a file for checkSeal (a variable for tests to count).
var hashSealed = hashFile

// File is one file of a sealed entry.
type File struct {
	// Path is slash-separated, relative to the entry.
	Path string      `json:"path"`
	Mode fs.FileMode `json:"mode"`
	// Size, MTime (Unix nanoseconds) and SHA256 are for regular files.
	Size   int64  `json:"size,omitempty"`
	MTime  int64  `json:"mtime,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	// Link is a symlink's target.
	Link string `json:"link,omitempty"`
	// Dev, Ino and CTime (Unix nanoseconds) are a regular file's identity
	// when it was sealed (format 2).
	Dev   uint64 `json:"dev,omitempty"`
	Ino   uint64 `json:"ino,omitempty"`
	CTime int64  `json:"ctime,omitempty"`
}

// identity is a file's device, inode and ctime.
func identity(fi fs.FileInfo) (dev, ino uint64, ctime int64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0
	}
	return uint64(st.Dev), st.Ino, st.Ctim.Nano() //nolint:unconvert // Dev is 32 bits on some architectures
}

func (f File) valid() error {
	if f.Path == "" || path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "." || strings.HasPrefix(f.Path, "../") || f.Path == ".." {
		return fmt.Errorf("path %q: not a clean relative path", f.Path)
	}
	if f.Size < 0 {
		return fmt.Errorf("%s: negative size", f.Path)
	}
	return nil
}

// seal fsyncs every file and directory under dir (so nothing is lost or
// truncated by a crash after the entry becomes visible) and returns its
// record, hashing regular files on the way.
func seal(dir string) ([]File, error) {
	return sealKnown(dir, nil)
}

// sealKnown is seal, taking the sha256 of a regular file from known (by
// path) when its size and mtime are the known ones: the file was checked
// against that sha256 as it was written (Import). It is still fsynced.
func sealKnown(dir string, known map[string]File) ([]File, error) {
	var files []File
	var dirs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if rel == metaFile {
			return fmt.Errorf("%s: reserved name", metaFile)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		f := File{Path: filepath.ToSlash(rel), Mode: fi.Mode()}
		switch {
		case fi.Mode().IsRegular():
			f.Size, f.MTime = fi.Size(), fi.ModTime().UnixNano()
			if k, ok := known[f.Path]; ok && k.SHA256 != "" && k.Size == f.Size && k.MTime == f.MTime {
				f.SHA256 = k.SHA256
				if err := syncFile(p); err != nil {
					return err
				}
			} else if f.SHA256, err = filehash.SHA256Sync(p); err != nil {
				return err
			}
			f.Dev, f.Ino, f.CTime = identity(fi)
		case fi.IsDir():
			dirs = append(dirs, p)
		case fi.Mode()&fs.ModeSymlink != 0:
			if f.Link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := checkLinks(files); err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return nil, err
		}
	}
	return files, nil
}

// errDamaged marks an entry that exists but does not match its seal.
var errDamaged = errors.New("does not match its seal")

// checkSeal compares the tree under dir with its record; contents adds the
// sha256 of every regular file. A regular file whose identity (device,
// inode, ctime) is not the sealed one is hashed; when every such file
// matches its sha256, resealed is the record with their new identities
// (nil when nothing changed).
func checkSeal(dir string, files []File, contents bool) (resealed []File, err error) {
	want := make(map[string]File, len(files))
	for _, f := range files {
		want[f.Path] = f
	}
	seen := 0
	moved := map[string]File{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." || rel == metaFile {
			return nil
		}
		rel = filepath.ToSlash(rel)
		w, ok := want[rel]
		if !ok {
			return fmt.Errorf("%s: %w: not in the seal", rel, errDamaged)
		}
		seen++
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode() != w.Mode {
			return fmt.Errorf("%s: %w: mode %v, sealed %v", rel, errDamaged, fi.Mode(), w.Mode)
		}
		switch {
		case fi.Mode().IsRegular():
			if fi.Size() != w.Size {
				return fmt.Errorf("%s: %w: %d bytes, sealed %d", rel, errDamaged, fi.Size(), w.Size)
			}
			if fi.ModTime().UnixNano() != w.MTime {
				return fmt.Errorf("%s: %w: modified after sealing", rel, errDamaged)
			}
			dev, ino, ctime := identity(fi)
			same := w.Ino != 0 && dev == w.Dev && ino == w.Ino && ctime == w.CTime
			if contents || !same {
				sum, err := hashSealed(p)
				if err != nil {
					return err
				}
				if sum != w.SHA256 {
					if !same {
						return fmt.Errorf("%s: %w: changed in place (its inode or ctime is not the sealed one and its sha256 differs)", rel, errDamaged)
					}
					return fmt.Errorf("%s: %w: sha256 differs", rel, errDamaged)
				}
			}
			if !same {
				w.Dev, w.Ino, w.CTime = dev, ino, ctime
				moved[rel] = w
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if t != w.Link {
				return fmt.Errorf("%s: %w: link target %q, sealed %q", rel, errDamaged, t, w.Link)
			}
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// A file vanished mid-walk: damaged, not absent.
			return nil, fmt.Errorf("%w: %v", errDamaged, err)
		}
		return nil, err
	}
	if seen != len(want) {
		return nil, fmt.Errorf("%w: %d of %d sealed files present", errDamaged, seen, len(want))
	}
	if len(moved) == 0 {
		return nil, nil
	}
	resealed = make([]File, len(files))
	for i, f := range files {
		if m, ok := moved[f.Path]; ok {
			f = m
		}
		resealed[i] = f
	}
	return resealed, nil
}

// hashFile is the hex sha256 of a file's contents.
func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func syncFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", p, err)
	}
	return nil
}
