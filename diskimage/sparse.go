package diskimage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// sparseBlock is the granularity at which zero runs are skipped: the page
// and file system block size, so a skipped block becomes a real hole.
const sparseBlock = 4096

var zeroBlock = make([]byte, sparseBlock)

// openInput opens an input file. Tests replace it to inject read failures.
var openInput = func(name string) (io.ReadCloser, error) { return os.Open(name) }

// copySparse copies exactly size bytes from r to w at offset off, without
// writing blocks that are all zeros: the output file was truncated to its
// full size beforehand, so those already read back as zeros and stay holes.
func copySparse(w io.WriterAt, off int64, r io.Reader, size int64) error {
	buf := make([]byte, 1<<20)
	var done int64
	for done < size {
		chunk := buf
		if left := size - done; left < int64(len(chunk)) {
			chunk = chunk[:left]
		}
		n, err := io.ReadFull(r, chunk)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("input ended after %d of %d bytes (did it change while writing?)", done+int64(n), size)
			}
			return fmt.Errorf("reading input at byte %d: %w", done+int64(n), err)
		}
		if err := writeNonZero(w, off+done, chunk); err != nil {
			return err
		}
		done += int64(n)
	}
	// The size was taken before copying; a longer input means it changed.
	var probe [1]byte
	if n, _ := r.Read(probe[:]); n > 0 {
		return fmt.Errorf("input is longer than the %d bytes planned (did it change while writing?)", size)
	}
	return nil
}

// writeNonZero writes the non-zero sparseBlock-sized runs of p at off,
// coalescing neighbours into one write.
func writeNonZero(w io.WriterAt, off int64, p []byte) error {
	start := -1 // start of the pending non-zero run, -1 if none
	flush := func(end int) error {
		if start < 0 {
			return nil
		}
		if _, err := w.WriteAt(p[start:end], off+int64(start)); err != nil {
			return fmt.Errorf("writing at byte %d: %w", off+int64(start), err)
		}
		start = -1
		return nil
	}
	for i := 0; i < len(p); i += sparseBlock {
		end := min(i+sparseBlock, len(p))
		if bytes.Equal(p[i:end], zeroBlock[:end-i]) {
			if err := flush(i); err != nil {
				return err
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	return flush(len(p))
}

// copyExtents is copySparse for a scratch file of ours (a FAT or ext4 we
// formatted, mostly holes): it reads only the file's data extents, found
// with SEEK_DATA and SEEK_HOLE, instead of having the kernel fill hundreds
// of MiB of holes with zeros only for them to be skipped here.
func copyExtents(w io.WriterAt, off int64, f *os.File, size int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != size {
		return fmt.Errorf("%s: %d bytes, want %d", f.Name(), fi.Size(), size)
	}
	for pos := int64(0); pos < size; {
		data, err := f.Seek(pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // holes to the end
		}
		if err != nil {
			return fmt.Errorf("%s: finding data after byte %d: %w", f.Name(), pos, err)
		}
		hole, err := f.Seek(data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("%s: finding a hole after byte %d: %w", f.Name(), data, err)
		}
		hole = min(hole, size)
		if err := copySparse(w, off+data, io.NewSectionReader(f, data, hole-data), hole-data); err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
		pos = hole
	}
	return nil
}
