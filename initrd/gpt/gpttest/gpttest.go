// Package gpttest makes disks for tests of code that reads GPTs: real
// os-builder disk images and hostile headers whose CRCs are valid.
package gpttest

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/initrd/gpt"
)

// DiskImage writes a real os-builder disk image (diskimage.Write, 512-byte
// sectors) with a fake UKI and a root image of rootSize bytes and returns
// its bytes.
func DiskImage(t testing.TB, rootSize int) []byte {
	t.Helper()
	dir := t.TempDir()
	uki, root, img := filepath.Join(dir, "uki.efi"), filepath.Join(dir, "root"), filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(uki, bytes.Repeat([]byte("UKI!"), 1<<18), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, bytes.Repeat([]byte("root"), rootSize/4), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := diskimage.Write(img, diskimage.Options{UKI: uki, Root: root, Seed: "pid1-test"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// MaxReadAt is an io.ReaderAt over R that records in Max the largest
// buffer it was asked to fill: what the reader allocated for one read.
type MaxReadAt struct {
	R   *bytes.Reader
	Max int
}

func (m *MaxReadAt) ReadAt(p []byte, off int64) (int, error) {
	m.Max = max(m.Max, len(p))
	return m.R.ReadAt(p, off)
}

// Sparse is a disk of Size bytes that is zero but for what Put wrote,
// later writes over earlier ones: a fuzzed disk of any size costs only the
// bytes a reader asks for. Max records the largest read, what the reader
// allocated for one.
type Sparse struct {
	Size    int64
	Max     int
	extents []extent
}

type extent struct {
	off int64
	b   []byte
}

// Put writes b at off (b is kept, not copied).
func (d *Sparse) Put(off int64, b []byte) { d.extents = append(d.extents, extent{off, b}) }

func (d *Sparse) ReadAt(p []byte, off int64) (int, error) {
	d.Max = max(d.Max, len(p))
	if off < 0 || off >= d.Size {
		return 0, io.EOF
	}
	n := len(p)
	if int64(n) > d.Size-off {
		n = int(d.Size - off)
	}
	clear(p[:n])
	for _, e := range d.extents {
		lo, hi := max(off, e.off), min(off+int64(n), e.off+int64(len(e.b)))
		if lo < hi {
			copy(p[lo-off:hi-off], e.b[lo-e.off:hi-e.off])
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Hostile is a disk of size bytes (512-byte sectors) whose primary GPT
// header has a valid CRC over whatever fields edit sets: a CRC proves
// nothing about the sizes.
func Hostile(size int, edit func(h []byte)) []byte {
	disk := make([]byte, size)
	h := disk[512 : 512+gpt.HeaderSize]
	copy(h, gpt.Signature)
	binary.LittleEndian.PutUint32(h[8:], gpt.Revision)
	binary.LittleEndian.PutUint32(h[12:], gpt.HeaderSize)
	binary.LittleEndian.PutUint64(h[24:], 1)
	binary.LittleEndian.PutUint64(h[72:], 2)
	binary.LittleEndian.PutUint32(h[80:], gpt.NumEntries)
	binary.LittleEndian.PutUint32(h[84:], gpt.EntrySize)
	binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(disk[1024:1024+gpt.NumEntries*gpt.EntrySize]))
	edit(h)
	Reseal(h)
	return disk
}

// Reseal recomputes the CRC of header h (exactly the header's bytes).
func Reseal(h []byte) {
	binary.LittleEndian.PutUint32(h[16:], 0)
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h))
}

// HostileHeader is a header edit a reader must refuse before allocating,
// with what its error must name.
type HostileHeader struct {
	Name string
	Edit func(h []byte)
	Want string
}

// HostileHeaders are the header sizes a reader must refuse.
func HostileHeaders() []HostileHeader {
	put32 := func(off int, v uint32) func([]byte) {
		return func(h []byte) { binary.LittleEndian.PutUint32(h[off:], v) }
	}
	put64 := func(off int, v uint64) func([]byte) {
		return func(h []byte) { binary.LittleEndian.PutUint64(h[off:], v) }
	}
	both := func(a, b func([]byte)) func([]byte) { return func(h []byte) { a(h); b(h) } }
	return []HostileHeader{
		{"entry size 1 MiB, 1024 entries (1 GiB)", both(put32(84, 1<<20), put32(80, 1024)), "entry size 1048576"},
		{"entry size 2^31", put32(84, 1<<31), "entry size 2147483648"},
		{"entry size 4 GiB - 8", both(put32(84, 0xfffffff8), put32(80, 1024)), "entry size 4294967288"},
		{"entry size not 128 * 2^n", put32(84, 136), "entry size 136"},
		{"entry size below 128", put32(84, 64), "entry size 64"},
		{"too many entries", put32(80, 4096), "4096 entries"},
		{"array over 1 MiB", both(put32(84, 4096), put32(80, 1024)), "1024 entries of 4096 bytes"},
		{"no entries", put32(80, 0), "0 entries"},
		{"entry array LBA overflows", put64(72, 1<<62), "out of range"},
	}
}

// Installed is the table the installer leaves on a disk of size bytes with
// sectors of ss bytes: osb-esp and osb-root, then osb-data up to the last
// usable LBA, starting at 1 MiB when the disk has room for that (at the
// first usable LBA on a small one). Nil when the disk cannot hold a GPT
// with three partitions.
func Installed(ss int, size int64) *gpt.Table {
	entrySectors := int64((gpt.NumEntries*gpt.EntrySize + ss - 1) / ss)
	sectors := size / int64(ss)
	if ss <= 0 || sectors < 2*(2+entrySectors)+1+3 {
		return nil
	}
	tb := &gpt.Table{SectorSize: ss, DiskGUID: gpt.MustGUID("0e5b0d1e-0000-4000-8000-000000000001")}
	first, last := tb.Usable(size)
	if start := uint64(1<<20) / uint64(ss); last > start && last-start >= 3*16 {
		first = start
	}
	n := (last - first + 1) / 3
	for i, name := range []string{"osb-esp", "osb-root", "osb-data"} {
		typ := gpt.TypeLinuxVar
		if i == 0 {
			typ = gpt.TypeESP
		}
		p := gpt.Partition{Index: i + 1, Type: gpt.MustGUID(typ), FirstLBA: first + uint64(i)*n, LastLBA: first + uint64(i+1)*n - 1, Name: name}
		p.GUID = tb.DiskGUID
		p.GUID[15] = byte(i + 2)
		if i == 2 {
			p.LastLBA = last
		}
		tb.Partitions = append(tb.Partitions, p)
	}
	return tb
}

// WriteTable writes both copies of tb to w, a disk of size bytes.
func WriteTable(t testing.TB, w io.WriterAt, tb *gpt.Table, size int64) {
	t.Helper()
	primary, backup, off, err := tb.Encode(size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(primary, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(backup, off); err != nil {
		t.Fatal(err)
	}
}
