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

	"github.com/ironcore-dev/os-builder/internal/filehash"
)

// The seal is the list of an entry's files written into its meta file. Lookup
// checks the entry against it with one lstat per file (set of paths, types,
// modes, sizes, mtimes), which stays cheap for multi-GB entries: a truncated,
// extended, rewritten, added or missing file is a miss. Same-size corruption
// that also restores the mtime (bit rot) passes Lookup; Verify catches it by
// rehashing the contents against the sha256 recorded at fill time.
const sealFormat = 1

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
			if f.SHA256, err = filehash.SHA256Sync(p); err != nil {
				return err
			}
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
// sha256 of every regular file.
func checkSeal(dir string, files []File, contents bool) error {
	want := make(map[string]File, len(files))
	for _, f := range files {
		want[f.Path] = f
	}
	seen := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
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
			if contents {
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				h := sha256.New()
				_, err = io.Copy(h, f)
				f.Close()
				if err != nil {
					return fmt.Errorf("hash %s: %w", p, err)
				}
				if hex.EncodeToString(h.Sum(nil)) != w.SHA256 {
					return fmt.Errorf("%s: %w: sha256 differs", rel, errDamaged)
				}
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
			return fmt.Errorf("%w: %v", errDamaged, err)
		}
		return err
	}
	if seen != len(want) {
		return fmt.Errorf("%w: %d of %d sealed files present", errDamaged, seen, len(want))
	}
	return nil
}
