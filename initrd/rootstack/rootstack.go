// Package rootstack is the layered root image: read-only file system images
// (squashfs or erofs), bottom first, in one file the init mounts as the
// lower layers of one overlay (lowerdir=top:...:base, as systemd-sysext
// stacks its images). The base layer (the Debian packages) changes only when
// the package set does; the layers' files, units and users are a small image
// on top, so changing one unit rebuilds kilobytes, not the whole tree.
//
// Layout: a 4 KiB header, then each part at a 4 KiB aligned offset, padded
// with zeros to the next 4 KiB:
//
//	offset  size  field
//	0       8     magic "OSBSTACK"
//	8       4     version, little endian (1)
//	12      4     number of parts n, 1..MaxParts
//	16      16*n  per part, bottom first: offset, size (uint64, little endian)
//	...           zeros up to HeaderSize
//
// The header comes first on purpose: a consumer that expects one squashfs
// fails on the magic instead of silently mounting the base without the
// layers above it.
package rootstack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

const (
	// Magic starts every stack file.
	Magic = "OSBSTACK"
	// Version is the only layout version there is.
	Version = 1
	// HeaderSize is the header's size and the alignment of every part.
	HeaderSize = 4096
	// MaxParts bounds the table (and the loop devices the init sets up).
	MaxParts = 16
)

// Part is one image inside a stack file.
type Part struct {
	Offset, Size int64
}

// ErrNotStack means the bytes do not start with Magic.
var ErrNotStack = errors.New("not a root stack (no " + Magic + " magic)")

// IsStack tells whether header starts like a stack file.
func IsStack(header []byte) bool { return bytes.HasPrefix(header, []byte(Magic)) }

// Parse reads the part table from the first HeaderSize bytes of a stack
// file of fileSize bytes. Every part must lie after the header, in order,
// 4 KiB aligned, without overlap and inside the file.
func Parse(header []byte, fileSize int64) ([]Part, error) {
	if !IsStack(header) {
		return nil, ErrNotStack
	}
	if len(header) < HeaderSize {
		return nil, fmt.Errorf("root stack: header of %d bytes, want %d", len(header), HeaderSize)
	}
	if v := binary.LittleEndian.Uint32(header[8:]); v != Version {
		return nil, fmt.Errorf("root stack: version %d, want %d", v, Version)
	}
	n := binary.LittleEndian.Uint32(header[12:])
	if n == 0 || n > MaxParts {
		return nil, fmt.Errorf("root stack: %d parts, want 1 to %d", n, MaxParts)
	}
	parts := make([]Part, n)
	next := int64(HeaderSize)
	for i := range parts {
		e := header[16+16*i:]
		off, size := binary.LittleEndian.Uint64(e), binary.LittleEndian.Uint64(e[8:])
		switch {
		case off%HeaderSize != 0:
			return nil, fmt.Errorf("root stack: part %d at offset %d, not 4 KiB aligned", i, off)
		case off < uint64(next):
			return nil, fmt.Errorf("root stack: part %d at offset %d overlaps what comes before (ends at %d)", i, off, next)
		case size == 0:
			return nil, fmt.Errorf("root stack: part %d is empty", i)
		case off > uint64(fileSize) || size > uint64(fileSize)-off:
			return nil, fmt.Errorf("root stack: part %d (offset %d, %d bytes) runs past the end of the file (%d bytes)", i, off, size, fileSize)
		}
		parts[i] = Part{Offset: int64(off), Size: int64(size)}
		next = int64(off+size+HeaderSize-1) / HeaderSize * HeaderSize
	}
	return parts, nil
}

// Read parses the table of the stack file r of size bytes.
func Read(r io.ReaderAt, size int64) ([]Part, error) {
	if size < HeaderSize {
		return nil, fmt.Errorf("root stack: %d bytes, shorter than its header", size)
	}
	h := make([]byte, HeaderSize)
	if _, err := r.ReadAt(h, 0); err != nil {
		return nil, fmt.Errorf("root stack: read header: %w", err)
	}
	return Parse(h, size)
}

// Layout places parts of the given sizes, bottom first, and returns the
// header and the file's total size.
func Layout(sizes []int64) (header []byte, parts []Part, total int64, err error) {
	if len(sizes) == 0 || len(sizes) > MaxParts {
		return nil, nil, 0, fmt.Errorf("root stack: %d parts, want 1 to %d", len(sizes), MaxParts)
	}
	header = make([]byte, HeaderSize)
	copy(header, Magic)
	binary.LittleEndian.PutUint32(header[8:], Version)
	binary.LittleEndian.PutUint32(header[12:], uint32(len(sizes)))
	off := int64(HeaderSize)
	for i, s := range sizes {
		if s <= 0 {
			return nil, nil, 0, fmt.Errorf("root stack: part %d is empty", i)
		}
		binary.LittleEndian.PutUint64(header[16+16*i:], uint64(off))
		binary.LittleEndian.PutUint64(header[24+16*i:], uint64(s))
		parts = append(parts, Part{Offset: off, Size: s})
		off += (s + HeaderSize - 1) / HeaderSize * HeaderSize
	}
	return header, parts, off, nil
}

// Write writes a stack of the image files paths (bottom first) to w and
// returns the number of bytes written.
func Write(w io.Writer, paths []string) (int64, error) {
	return WriteOpened(w, paths, os.Open)
}

// WriteOpened is Write with the files opened by open: the builder opens a
// layer step's image inside the step's directory, so a link there does
// not put a file from elsewhere into the stack.
func WriteOpened(w io.Writer, paths []string, open func(string) (*os.File, error)) (int64, error) {
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var sizes []int64
	for _, p := range paths {
		f, err := open(p)
		if err != nil {
			return 0, fmt.Errorf("root stack: %w", err)
		}
		files = append(files, f)
		fi, err := f.Stat()
		if err != nil {
			return 0, fmt.Errorf("root stack: %w", err)
		}
		sizes = append(sizes, fi.Size())
	}
	header, parts, _, err := Layout(sizes)
	if err != nil {
		return 0, err
	}
	n, err := w.Write(header)
	written := int64(n)
	if err != nil {
		return written, fmt.Errorf("root stack: write header: %w", err)
	}
	zeros := make([]byte, HeaderSize)
	for i, p := range paths {
		c, err := io.Copy(w, io.LimitReader(files[i], parts[i].Size))
		written += c
		if err == nil && c != parts[i].Size {
			err = fmt.Errorf("%s changed size while being written", p)
		}
		if err != nil {
			return written, fmt.Errorf("root stack: part %d (%s): %w", i, p, err)
		}
		pad := (HeaderSize - c%HeaderSize) % HeaderSize
		n, err := w.Write(zeros[:pad])
		written += int64(n)
		if err != nil {
			return written, fmt.Errorf("root stack: pad part %d: %w", i, err)
		}
	}
	return written, nil
}
