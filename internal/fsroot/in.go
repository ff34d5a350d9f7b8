package fsroot

import (
	"fmt"
	"os"
	"path/filepath"
)

// OpenFileIn opens the regular file name of the host directory dir,
// resolved inside dir (see Root.Open): how one package reads a file
// another handed on in its own directory (a build step's output, a cache
// entry), so that a symlink there cannot hand out a file elsewhere on
// the host (a signing key). A link that would leave dir resolves inside
// it, as in a chroot, and names nothing that exists there.
func OpenFileIn(dir, name string) (*os.File, error) {
	r, err := Open(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.Open(name)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, r.errorf("open", name, fmt.Errorf("not a regular file (%s)", fi.Mode().Type()))
	}
	return f, nil
}

// OpenPath is OpenFileIn of p's directory and last component: for a file
// path handed on whole (its directory is the one it was made in).
func OpenPath(p string) (*os.File, error) {
	return OpenFileIn(filepath.Dir(p), filepath.Base(p))
}

// ReadFileIn reads the regular file name of dir, resolved inside dir (see
// OpenFileIn), refusing one larger than limit before reading it.
func ReadFileIn(dir, name string, limit int64) ([]byte, error) {
	r, err := Open(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.ReadFile(name, limit)
}

// ReadPath is ReadFileIn of p's directory and last component.
func ReadPath(p string, limit int64) ([]byte, error) {
	return ReadFileIn(filepath.Dir(p), filepath.Base(p), limit)
}
