package artifacts

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/ironcore-dev/os-builder/internal/filehash"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/osimage"
)

// artifactDir writes artifact files into one directory, hashing them while
// they are written, so that the manifest needs no second read. Writers run
// concurrently (see artifactWriters).
type artifactDir struct {
	dir  string
	mu   sync.Mutex
	sums map[string]string // file name -> hex sha256, for files written here
}

func newArtifactDir(dir string) *artifactDir {
	return &artifactDir{dir: dir, sums: map[string]string{}}
}

func (d *artifactDir) setSum(name, sum string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sums[name] = sum
}

// write creates name and fills it through fill, hashing what it writes.
func (d *artifactDir) write(name string, fill func(w io.Writer) error) (err error) {
	f, err := os.OpenFile(filepath.Join(d.dir, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	if err := fill(bw); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	d.setSum(name, hex.EncodeToString(h.Sum(nil)))
	return nil
}

// writeFile creates name and has fill write it (at any offsets) and
// return its sha256. Like write, it neither syncs nor renames: the
// directory is published whole (and its artifacts are sealed) once every
// writer is done; a failed writer leaves nothing.
func (d *artifactDir) writeFile(name string, fill func(f *os.File) (string, error)) (err error) {
	p := filepath.Join(d.dir, name)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(p)
		}
	}()
	sum, err := fill(f)
	if err != nil {
		return err
	}
	d.setSum(name, sum)
	return nil
}

// concat writes the files srcs, one after the other, as name.
func (d *artifactDir) concat(name string, srcs ...string) error {
	return d.write(name, func(w io.Writer) error {
		for _, src := range srcs {
			// Inside its directory: srcs are step outputs (fsroot).
			f, err := fsroot.OpenPath(src)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("copy %s: %w", src, err)
			}
		}
		return nil
	})
}

// describe returns the manifest entry of name: the digest taken while it
// was written, or, for files other writers made, read once.
func (d *artifactDir) describe(kind osimage.ArtifactKind, name string) (osimage.Artifact, error) {
	p := filepath.Join(d.dir, name)
	fi, err := os.Stat(p)
	if err != nil {
		return osimage.Artifact{}, err
	}
	d.mu.Lock()
	sum, ok := d.sums[name]
	d.mu.Unlock()
	if !ok {
		if sum, err = filehash.SHA256(p); err != nil {
			return osimage.Artifact{}, err
		}
	}
	return osimage.Artifact{Kind: kind, Path: name, Size: fi.Size(), SHA256: sum}, nil
}
