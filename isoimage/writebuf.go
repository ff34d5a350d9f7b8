package isoimage

import (
	"bytes"

	"github.com/diskfs/go-diskfs/backend"
)

// coalescingBackend gathers go-diskfs' writes before they reach the file.
// iso9660.Finalize copies file data in 2 KiB WriteAt calls, one syscall
// each; consecutive writes are merged here into writes of up to 4 MiB.
//
// It writes to a new, empty file, so zeros past everything written so far
// are what the file reads as anyway: such writes are left out (the file
// keeps holes there). That makes copying the boot image's placeholder, a
// hole the size of the FAT, free; the FAT is written in its place later.
type coalescingBackend struct {
	backend.Storage
	w   backend.WritableFile
	off int64  // file offset of buf[0]
	buf []byte // pending bytes, len(buf) <= cap(buf)
	end int64  // end of the furthest write that reached the file
	err error  // first failed flush, reported by every later call
}

func newCoalescingBackend(s backend.Storage) (*coalescingBackend, error) {
	w, err := s.Writable()
	if err != nil {
		return nil, err
	}
	return &coalescingBackend{Storage: s, w: w, buf: make([]byte, 0, 4<<20)}, nil
}

func (c *coalescingBackend) Writable() (backend.WritableFile, error) { return c, nil }

func (c *coalescingBackend) WriteAt(p []byte, off int64) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if len(c.buf) > 0 && off != c.off+int64(len(c.buf)) || len(c.buf)+len(p) > cap(c.buf) {
		if err := c.Flush(); err != nil {
			return 0, err
		}
	}
	if len(p) > cap(c.buf) {
		return c.writeAt(p, off)
	}
	if len(c.buf) == 0 {
		c.off = off
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// ReadAt flushes first so reads see every write.
func (c *coalescingBackend) ReadAt(p []byte, off int64) (int, error) {
	if err := c.Flush(); err != nil {
		return 0, err
	}
	return c.Storage.ReadAt(p, off)
}

// Flush writes the pending bytes.
func (c *coalescingBackend) Flush() error {
	if c.err != nil || len(c.buf) == 0 {
		return c.err
	}
	if _, err := c.writeAt(c.buf, c.off); err != nil {
		c.err = err
		return err
	}
	c.buf = c.buf[:0]
	return nil
}

// writeAt writes p unless it is zeros past c.end.
func (c *coalescingBackend) writeAt(p []byte, off int64) (int, error) {
	if off >= c.end && allZero(p) {
		return len(p), nil
	}
	n, err := c.w.WriteAt(p, off)
	c.end = max(c.end, off+int64(n))
	return n, err
}

var zeroBlock = make([]byte, 64<<10)

func allZero(p []byte) bool {
	for len(p) > 0 {
		n := min(len(p), len(zeroBlock))
		if !bytes.Equal(p[:n], zeroBlock[:n]) {
			return false
		}
		p = p[n:]
	}
	return true
}
