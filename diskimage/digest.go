package diskimage

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sort"

	"github.com/ironcore-dev/os-builder/internal/atomicfile"
)

// WriteDigest is Write that also returns the image's sha256 (hex), taken
// from the bytes as they are written, holes as the zeros they read back
// as: the caller need not read the image again.
func WriteDigest(path string, opts Options) (string, error) {
	l, err := Plan(opts)
	if err != nil {
		return "", fmt.Errorf("disk image %s: %w", path, err)
	}
	var sum string
	err = atomicfile.Write(path, 0o644, func(f *os.File) error {
		sum, err = l.writeDigest(f, opts)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("disk image %s: %w", path, err)
	}
	return sum, nil
}

// WriteInto writes the disk image into f, a new empty file, and returns
// its sha256 (hex) as WriteDigest does, without a temp file, rename or
// sync: for a caller that makes a whole directory of files and publishes
// it in one step (the builder's staging directory).
func WriteInto(f *os.File, opts Options) (string, error) {
	l, err := Plan(opts)
	if err != nil {
		return "", fmt.Errorf("disk image: %w", err)
	}
	sum, err := l.writeDigest(f, opts)
	if err != nil {
		return "", fmt.Errorf("disk image %s: %w", f.Name(), err)
	}
	return sum, nil
}

func (l *Layout) writeDigest(f *os.File, opts Options) (string, error) {
	h := newOrderedHash(f, l.end())
	if err := l.writeTo(f, h, opts); err != nil {
		return "", err
	}
	return h.sum(l.DiskSize)
}

// end is where the last partition ends; only the backup GPT follows.
func (l *Layout) end() int64 {
	if l.DataSize > 0 {
		return l.DataStart + l.DataSize
	}
	return l.RootStart + l.RootSize
}

// maxTail bounds what orderedHash holds back: the backup GPT is 16.5 KiB.
const maxTail = 1 << 20

// orderedHash hashes what is written through it, at offsets that only go
// forward, gaps as zeros. Writes at or after tailFrom (the backup GPT,
// written with the primary one) are held back and hashed at the end.
type orderedHash struct {
	w         io.WriterAt
	h         hash.Hash
	next      int64 // bytes hashed so far
	tailFrom  int64
	tail      map[int64][]byte
	tailBytes int
	err       error // the first write out of order
}

func newOrderedHash(w io.WriterAt, tailFrom int64) *orderedHash {
	return &orderedHash{w: w, h: sha256.New(), tailFrom: tailFrom, tail: map[int64][]byte{}}
}

// errUnordered means a writer went back: a bug in the disk writer.
var errUnordered = errors.New("disk image written out of order")

func (o *orderedHash) WriteAt(p []byte, off int64) (int, error) {
	n, err := o.w.WriteAt(p, off)
	if err != nil || o.err != nil {
		return n, err
	}
	switch end := off + int64(len(p)); {
	case off >= o.tailFrom:
		o.tailBytes += len(p)
		if _, dup := o.tail[off]; dup || o.tailBytes > maxTail {
			o.err = fmt.Errorf("%w: %d bytes after the last partition", errUnordered, o.tailBytes)
			break
		}
		o.tail[off] = append([]byte(nil), p...)
	case off < o.next || end > o.tailFrom:
		o.err = fmt.Errorf("%w: %d bytes at %d after %d", errUnordered, len(p), off, o.next)
	default:
		o.zeros(off - o.next)
		o.h.Write(p)
		o.next = end
	}
	return n, nil
}

var zeroChunk = make([]byte, 1<<20)

func (o *orderedHash) zeros(n int64) {
	for n > 0 {
		c := min(n, int64(len(zeroChunk)))
		o.h.Write(zeroChunk[:c])
		n -= c
	}
}

// sum hashes the held-back tail and the zeros up to size.
func (o *orderedHash) sum(size int64) (string, error) {
	if o.err != nil {
		return "", o.err
	}
	offs := make([]int64, 0, len(o.tail))
	for off := range o.tail {
		offs = append(offs, off)
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	for _, off := range offs {
		p := o.tail[off]
		if off < o.next || off+int64(len(p)) > size {
			return "", fmt.Errorf("%w: %d bytes at %d after %d", errUnordered, len(p), off, o.next)
		}
		o.zeros(off - o.next)
		o.h.Write(p)
		o.next = off + int64(len(p))
	}
	o.zeros(size - o.next)
	return hex.EncodeToString(o.h.Sum(nil)), nil
}
