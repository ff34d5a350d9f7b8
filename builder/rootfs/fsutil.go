package rootfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/ironcore-dev/os-builder/internal/filehash"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// copyFile copies the host file src to dst (creating parents), replacing
// dst atomically.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return writeHostFile(in, dst, mode)
}

// writeHostFile writes what in holds to the host path dst (creating
// parents), replacing dst atomically.
func writeHostFile(in io.Reader, dst string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".osb-copy-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// The helpers below move files into and out of an image tree; paths in the
// tree resolve inside it (fsroot), host paths are the builder's own.

// copyIn copies the host file src to name in the tree (creating parents),
// replacing what name was, a symlink included, in one rename.
func copyIn(root *fsroot.Root, src, name string, mode os.FileMode) error {
	return copyInFrom(root, os.Open, src, name, mode)
}

// copyStepFileIn is copyIn of a file of a step's output, opened inside its
// directory (a link there does not put a host file into the image).
func copyStepFileIn(root *fsroot.Root, src, name string, mode os.FileMode) error {
	return copyInFrom(root, fsroot.OpenPath, src, name, mode)
}

func copyInFrom(root *fsroot.Root, open func(string) (*os.File, error), src, name string, mode os.FileMode) error {
	in, err := open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	return root.WriteFile(name, in, mode)
}

// copyTreeIn copies the host file, symlink or directory tree src, from a
// source checkout, to the absent name in the tree as cp -a
// --no-preserve=ownership does, but with modes as git keeps them
// (filehash.CheckoutMode), not as the checkout's umask left them, so two
// clones give the same image; symlinks as they are (a symlink's target is
// stored, not followed).
func copyTreeIn(root *fsroot.Root, src, name string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := path.Join(name, filepath.ToSlash(rel))
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := filehash.CheckoutMode(fi.Mode()).Perm()
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return root.Symlink(target, to)
		case fi.IsDir():
			if err := root.Mkdir(to, 0o700); err != nil {
				return err
			}
			return root.Chmod(to, mode) // exact, whatever the umask
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return root.WriteFile(to, f, mode)
		default:
			return fmt.Errorf("%s: %s is not a regular file, directory or symlink", p, fi.Mode().Type())
		}
	})
}

// copyOut copies the regular file name out of the tree to the host path
// dst (replacing it atomically).
func copyOut(root *fsroot.Root, name, dst string, mode os.FileMode) error {
	in, err := root.Open(name)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file (%s)", in.Name(), fi.Mode().Type())
	}
	return writeHostFile(in, dst, mode)
}

// replaceSymlink makes name in the tree a symlink to target, creating
// parents and replacing what name was.
func replaceSymlink(root *fsroot.Root, target, name string) error {
	if err := root.MkdirAll(path.Dir(name), 0o755); err != nil {
		return err
	}
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return root.Symlink(target, name)
}
