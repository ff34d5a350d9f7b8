package ocistore

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
)

// maxArchiveEntries bounds the files an oci-archive may unpack to; a
// layout has a handful of files per image.
const maxArchiveEntries = 1 << 16

// Untar unpacks a plain tar archive (an oci-archive) into dir. Only
// directories and regular files are made, all through an os.Root on dir,
// so no name (`..`, absolute, through a link) reaches outside it; links
// and devices are skipped (a layout has none). An oci-archive is not
// compressed, so its files together cannot be larger than the archive:
// that bounds what a hostile header (a huge or sparse size) can write.
func Untar(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return untar(f, fi.Size(), root)
}

func untar(r io.Reader, budget int64, root *os.Root) error {
	tr := tar.NewReader(r)
	for entries := 0; ; entries++ {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		if entries >= maxArchiveEntries {
			return fmt.Errorf("archive has more than %d entries", maxArchiveEntries)
		}
		name := path.Clean("/" + h.Name)[1:]
		if name == "" {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("archive entry %q: %w", h.Name, err)
			}
		case tar.TypeReg:
			if h.Size < 0 || h.Size > budget {
				return fmt.Errorf("archive entry %q: %d bytes, more than the archive holds", h.Name, h.Size)
			}
			budget -= h.Size
			if dir := path.Dir(name); dir != "." {
				if err := root.MkdirAll(dir, 0o755); err != nil {
					return fmt.Errorf("archive entry %q: %w", h.Name, err)
				}
			}
			if err := writeEntry(root, name, tr, h.Size); err != nil {
				return fmt.Errorf("archive entry %q: %w", h.Name, err)
			}
		}
	}
}

func writeEntry(root *os.Root, name string, r io.Reader, size int64) error {
	w, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	n, err := io.Copy(w, io.LimitReader(r, size))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = errors.New("archive ends inside the file")
	}
	return err
}
