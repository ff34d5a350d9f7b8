package initrd

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// Compression is how the cpio archive is compressed.
type Compression string

const (
	// CompressionNone writes the plain cpio archive.
	CompressionNone Compression = "none"
	// CompressionZstd is the default for initrds. Debian's kernels are built
	// with CONFIG_RD_ZSTD, and zstd decompresses several times faster than
	// gzip at a similar ratio. That matters here because in memory mode the
	// root image rides inside the initrd: the kernel unpacks hundreds of MiB
	// before the init runs, single-threaded, on every boot.
	CompressionZstd Compression = "zstd"
	// CompressionGzip is for consumers that cannot read zstd.
	CompressionGzip Compression = "gzip"
)

// WriteOptions control how an archive is written.
type WriteOptions struct {
	// SourceDateEpoch is the mtime of every entry (seconds since 1970).
	SourceDateEpoch int64
	// Compression; the zero value means CompressionNone.
	Compression Compression
}

// newc limits: every header field is 8 hex digits.
const maxNewcValue = 1<<32 - 1

// zstd encoder settings, fixed so the same input gives the same bytes on
// every machine: the library's defaults follow GOMAXPROCS, which must not
// leak into the output. 8 MiB windows keep the kernel's decompressor within
// its boot-time memory budget.
func newZstdWriter(w io.Writer) (*zstd.Encoder, error) {
	return zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		zstd.WithEncoderConcurrency(2),
		zstd.WithWindowSize(8<<20),
		zstd.WithEncoderCRC(true),
		zstd.WithConcurrentBlocks(false),
		zstd.WithZeroFrames(false),
	)
}

// Encode writes the archive to w: entries sorted by path (parents first),
// owned by 0:0 unless SetOwner said otherwise, every mtime set to
// opts.SourceDateEpoch, inode numbers counted from 1 in that order, then
// compressed as opts asks. Host files are streamed at this point.
//
// The newc format is written by this package itself rather than through
// github.com/cavaliergopher/cpio's Writer, which cannot express device
// numbers (/dev/console needs rdev 5:1); that package's Reader is used to
// check the output in tests.
func (a *Archive) Encode(w io.Writer, opts WriteOptions) (err error) {
	if len(a.entries) == 0 {
		return errNoEntries
	}
	if opts.SourceDateEpoch < 0 || opts.SourceDateEpoch > maxNewcValue {
		return fmt.Errorf("initrd: SourceDateEpoch %d does not fit a newc header", opts.SourceDateEpoch)
	}
	var out io.Writer
	var closeCompressor func() error
	switch opts.Compression {
	case "", CompressionNone:
		out = w
	case CompressionZstd:
		zw, err := newZstdWriter(w)
		if err != nil {
			return fmt.Errorf("initrd: zstd: %w", err)
		}
		out, closeCompressor = zw, zw.Close
	case CompressionGzip:
		// No name and a zero mtime in the gzip header keep it reproducible.
		gw, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
		if err != nil {
			return fmt.Errorf("initrd: gzip: %w", err)
		}
		out, closeCompressor = gw, gw.Close
	default:
		return fmt.Errorf("initrd: unknown compression %q", opts.Compression)
	}
	bw := bufio.NewWriterSize(out, 1<<20)
	if err := a.encodeCPIO(bw, opts.SourceDateEpoch); err != nil {
		if closeCompressor != nil {
			closeCompressor()
		}
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("initrd: write: %w", err)
	}
	if closeCompressor != nil {
		if err := closeCompressor(); err != nil {
			return fmt.Errorf("initrd: finish %s stream: %w", opts.Compression, err)
		}
	}
	return nil
}

// linkGroup is a regular file and its further names.
type linkGroup struct {
	names []string // sorted; the data goes with the last one
	ino   int64
}

func (a *Archive) encodeCPIO(w io.Writer, mtime int64) error {
	names := a.sortedNames()

	// Group hardlinks under the regular file they name.
	groups := map[string]*linkGroup{}
	for _, n := range names {
		e := a.entries[n]
		switch e.kind {
		case kindFile:
			if groups[n] == nil {
				groups[n] = &linkGroup{}
			}
			groups[n].names = append(groups[n].names, n)
		case kindHardlink:
			t, ok := a.entries[e.linkTo]
			if !ok || t.kind != kindFile {
				return fmt.Errorf("initrd: hardlink %s: %s is not a regular file in the archive", n, e.linkTo)
			}
			if groups[e.linkTo] == nil {
				groups[e.linkTo] = &linkGroup{}
			}
			groups[e.linkTo].names = append(groups[e.linkTo].names, n)
		}
	}
	// Directory link counts: 2 plus one per subdirectory, as on disk.
	subdirs := map[string]int{}
	for _, n := range names {
		if a.entries[n].kind == kindDir {
			if p := path.Dir(n); p != "." {
				subdirs[p]++
			}
		}
	}

	var nextIno int64
	for _, n := range names {
		e := a.entries[n]
		h := newcHeader{name: n, mtime: mtime, uid: e.uid, gid: e.gid, nlink: 1}
		var body func() error
		switch e.kind {
		case kindDir:
			h.mode = 0o040000 | modeBits(e.perm)
			h.nlink = 2 + subdirs[n]
		case kindSymlink:
			h.mode = 0o120000 | 0o777
			h.size = int64(len(e.target))
			body = func() error { _, err := io.WriteString(w, e.target); return err }
		case kindCharDev, kindBlockDev:
			h.mode = 0o020000 | modeBits(e.perm)
			if e.kind == kindBlockDev {
				h.mode = 0o060000 | modeBits(e.perm)
			}
			h.rdevMajor, h.rdevMinor = e.major, e.minor
		case kindFile, kindHardlink:
			fileName := n
			if e.kind == kindHardlink {
				fileName = e.linkTo
			}
			file := a.entries[fileName]
			g := groups[fileName]
			if g.ino == 0 {
				nextIno++
				g.ino = nextIno
			}
			h.ino = g.ino
			h.mode = 0o100000 | modeBits(file.perm)
			h.uid, h.gid = file.uid, file.gid
			h.nlink = len(g.names)
			// newc convention (GNU cpio, and fine for the kernel): only the
			// last name of a hardlinked file carries the data.
			if n == g.names[len(g.names)-1] {
				h.size = file.size
				body = func() error { return writeFileData(w, file) }
			}
		}
		if h.ino == 0 {
			nextIno++
			h.ino = nextIno
		}
		if err := h.write(w); err != nil {
			return fmt.Errorf("initrd: %s: %w", n, err)
		}
		if body != nil {
			if err := body(); err != nil {
				return fmt.Errorf("initrd: %s: %w", n, err)
			}
			if err := writePad(w, h.size); err != nil {
				return fmt.Errorf("initrd: %s: %w", n, err)
			}
		}
	}
	trailer := newcHeader{name: "TRAILER!!!", nlink: 1}
	if err := trailer.write(w); err != nil {
		return fmt.Errorf("initrd: trailer: %w", err)
	}
	return nil
}

func writeFileData(w io.Writer, e *entry) error {
	if e.hostPath == "" {
		_, err := w.Write(e.data)
		return err
	}
	// Inside its directory, as it was added: a link put there since is
	// not followed out of it.
	f, err := fsroot.OpenPath(e.hostPath)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != e.size {
		return fmt.Errorf("%s changed size since it was added (%d, now %d)", e.hostPath, e.size, fi.Size())
	}
	n, err := io.Copy(w, f)
	if err != nil {
		return fmt.Errorf("copy %s: %w", e.hostPath, err)
	}
	if n != e.size {
		return fmt.Errorf("%s: read %d bytes, want %d", e.hostPath, n, e.size)
	}
	return nil
}

// modeBits turns fs.FileMode permission and special bits into the Unix ones.
func modeBits(m fs.FileMode) uint32 {
	b := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

type newcHeader struct {
	name                 string
	ino                  int64
	mode                 uint32
	uid, gid             int
	nlink                int
	mtime                int64
	size                 int64
	rdevMajor, rdevMinor uint32
}

var zeros [4]byte

func writePad(w io.Writer, n int64) error {
	_, err := w.Write(zeros[:(4-n%4)%4])
	return err
}

// write emits the 110-byte "070701" header, the NUL-terminated name, and
// padding to a 4-byte boundary.
func (h *newcHeader) write(w io.Writer) error {
	fields := []int64{
		h.ino, int64(h.mode), int64(h.uid), int64(h.gid), int64(h.nlink),
		h.mtime, h.size,
		0, 0, // devmajor, devminor of the file system holding the file
		int64(h.rdevMajor), int64(h.rdevMinor),
		int64(len(h.name) + 1),
		0, // check: only for the "070702" crc format
	}
	buf := make([]byte, 0, 110+len(h.name)+4)
	buf = append(buf, "070701"...)
	for i, v := range fields {
		if v < 0 || v > maxNewcValue {
			return fmt.Errorf("newc header field %d value %d out of range (files must be < 4 GiB)", i, v)
		}
		buf = fmt.Appendf(buf, "%08X", v)
	}
	buf = append(buf, h.name...)
	buf = append(buf, 0)
	for len(buf)%4 != 0 {
		buf = append(buf, 0)
	}
	_, err := w.Write(buf)
	return err
}
