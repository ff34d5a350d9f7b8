package filehash

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Tree hashes a file or a directory tree: relative paths, modes, symlink
// targets and file contents, in lexical order (WalkDir's order).
func Tree(root string) (string, error) {
	return tree(root, func(m fs.FileMode) fs.FileMode { return m })
}

// SourceTree hashes a tree from a source checkout as Tree does, with each
// mode as CheckoutMode gives it: what the umask of a clone changes does
// not count.
func SourceTree(root string) (string, error) { return tree(root, CheckoutMode) }

// CheckoutMode is the mode git keeps of a file, whatever the checkout's
// umask made of it: a directory 0755, a regular file 0755 when any
// execute bit is set, else 0644; a symlink as it is.
func CheckoutMode(m fs.FileMode) fs.FileMode {
	switch {
	case m.IsDir():
		return fs.ModeDir | 0o755
	case m.IsRegular() && m&0o111 != 0:
		return 0o755
	case m.IsRegular():
		return 0o644
	}
	return m
}

func tree(root string, mode func(fs.FileMode) fs.FileMode) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%o\x00", rel, mode(info.Mode()))
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\n", t)
		case info.Mode().IsRegular():
			sum, err := SHA256(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\n", sum)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
