package pid1

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
)

// maxReadAt is an io.ReaderAt over b that records the largest buffer it was
// asked to fill: what the reader allocated for one read.
type maxReadAt struct {
	r   *bytes.Reader
	max int
}

func (m *maxReadAt) ReadAt(p []byte, off int64) (int, error) {
	m.max = max(m.max, len(p))
	return m.r.ReadAt(p, off)
}

// hostileGPT is a disk of size bytes whose primary GPT header has a valid
// CRC over whatever fields edit sets: a CRC proves nothing about the sizes.
func hostileGPT(size int, edit func(h []byte)) []byte {
	disk := make([]byte, size)
	h := disk[512 : 512+gptHeaderSize]
	copy(h, gptSignature)
	binary.LittleEndian.PutUint32(h[8:], gptRevision)
	binary.LittleEndian.PutUint32(h[12:], gptHeaderSize)
	binary.LittleEndian.PutUint64(h[24:], 1)
	binary.LittleEndian.PutUint64(h[72:], 2)
	binary.LittleEndian.PutUint32(h[80:], gptNumEntries)
	binary.LittleEndian.PutUint32(h[84:], gptEntrySize)
	binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(disk[1024:1024+gptNumEntries*gptEntrySize]))
	edit(h)
	binary.LittleEndian.PutUint32(h[16:], 0)
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h))
	return disk
}

// TestReadGPTBoundsSizes feeds headers with valid CRCs and hostile sizes:
// each is refused with an error naming the field, and no read (no
// allocation) is larger than the bound. Before the bounds, entry sizes up
// to 4 GiB times 1024 entries were allocated as claimed.
func TestReadGPTBoundsSizes(t *testing.T) {
	const size = 4 << 20
	put32 := func(off int, v uint32) func([]byte) {
		return func(h []byte) { binary.LittleEndian.PutUint32(h[off:], v) }
	}
	put64 := func(off int, v uint64) func([]byte) {
		return func(h []byte) { binary.LittleEndian.PutUint64(h[off:], v) }
	}
	both := func(a, b func([]byte)) func([]byte) { return func(h []byte) { a(h); b(h) } }
	for _, tc := range []struct {
		name string
		edit func([]byte)
		want string
	}{
		{"entry size 1 MiB, 1024 entries (1 GiB)", both(put32(84, 1<<20), put32(80, 1024)), "entry size 1048576"},
		{"entry size 2^31", put32(84, 1<<31), "entry size 2147483648"},
		{"entry size 4 GiB - 8", both(put32(84, 0xfffffff8), put32(80, 1024)), "entry size 4294967288"},
		{"entry size not 128 * 2^n", put32(84, 136), "entry size 136"},
		{"entry size below 128", put32(84, 64), "entry size 64"},
		{"too many entries", put32(80, 4096), "4096 entries"},
		{"array over 1 MiB", both(put32(84, 4096), put32(80, 1024)), "1024 entries of 4096 bytes"},
		{"no entries", put32(80, 0), "0 entries"},
		{"entry array LBA overflows", put64(72, 1<<62), "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &maxReadAt{r: bytes.NewReader(hostileGPT(size, tc.edit))}
			_, err := readGPT(r, 512, size)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to name %q", err, tc.want)
			}
			if r.max > gptMaxEntryArray {
				t.Errorf("a read of %d bytes: more than the %d-byte bound was allocated", r.max, gptMaxEntryArray)
			}
			// The classifier calls such a disk foreign, naming the field.
			k, _, reason, err := classifyDisk(bytes.NewReader(hostileGPT(size, tc.edit)), 512, size)
			if err != nil || k != diskForeign || !strings.Contains(reason, tc.want) {
				t.Errorf("classifyDisk: %v %q %v", k, reason, err)
			}
		})
	}
	// The largest array the bounds allow is read.
	ok := hostileGPT(size, both(put32(84, 1024), put32(80, 1024)))
	binary.LittleEndian.PutUint32(ok[512+88:], crc32.ChecksumIEEE(ok[1024:1024+1<<20]))
	h := ok[512 : 512+gptHeaderSize]
	binary.LittleEndian.PutUint32(h[16:], 0)
	binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h))
	if _, err := readGPT(bytes.NewReader(ok), 512, size); err != nil {
		t.Errorf("1024 entries of 1024 bytes: %v", err)
	}
}

// TestReadGPTBoundsPartitions: entries whose LBAs overflow a byte offset or
// lie past the end of the disk make the table damaged, not trusted.
func TestReadGPTBoundsPartitions(t *testing.T) {
	img := testImage(t, 1<<20)
	size := int64(len(img))
	for _, tc := range []struct {
		name        string
		first, last uint64
		want        string
	}{
		{"last LBA overflows int64 bytes", 2048, 1 << 62, "spans LBA"},
		{"first after last", 4096, 2048, "spans LBA"},
		{"past the end of the disk", 2048, uint64(size / 512), "past the end of the disk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, err := readGPT(bytes.NewReader(img), 512, size)
			if err != nil {
				t.Fatal(err)
			}
			// Write the bad entry with valid CRCs, in both copies.
			disk := append([]byte(nil), img...)
			for _, hdrLBA := range []int64{1, size/512 - 1} {
				h := disk[hdrLBA*512 : hdrLBA*512+gptHeaderSize]
				entries := int64(binary.LittleEndian.Uint64(h[72:])) * 512
				e := disk[entries : entries+gptNumEntries*gptEntrySize]
				binary.LittleEndian.PutUint64(e[(tb.Partitions[0].Index-1)*gptEntrySize+32:], tc.first)
				binary.LittleEndian.PutUint64(e[(tb.Partitions[0].Index-1)*gptEntrySize+40:], tc.last)
				binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(e))
				binary.LittleEndian.PutUint32(h[16:], 0)
				binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h))
			}
			if _, err := readGPT(bytes.NewReader(disk), 512, size); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestReadGPTTinyDisk: a disk smaller than a GPT is no GPT, not a panic or
// a read at a wrapped-around offset.
func TestReadGPTTinyDisk(t *testing.T) {
	for _, size := range []int64{0, 511, 1024} {
		if _, err := readGPT(bytes.NewReader(make([]byte, size)), 512, size); err == nil {
			t.Errorf("size %d: no error", size)
		}
		if k, _, _, err := classifyDisk(bytes.NewReader(make([]byte, size)), 512, size); err != nil || k != diskBlank {
			t.Errorf("size %d: %v %v", size, k, err)
		}
	}
}

// FuzzGPT reads fuzzed bytes as a disk: the reader must not panic, must not
// allocate past its bounds, and what it accepts must be a table that
// encodes back for that disk's geometry or is refused with an error.
func FuzzGPT(f *testing.F) {
	img := testImage(f, 1<<20)
	f.Add(img[:64<<10])
	small := &gptTable{SectorSize: 512, Partitions: []gptPartition{{Index: 2, Type: mustGUID(gptTypeESP), FirstLBA: 40, LastLBA: 80, Name: "osb-esp"}}}
	if p, bk, off, err := small.encode(128 << 10); err == nil {
		disk := make([]byte, 128<<10)
		copy(disk, p)
		copy(disk[off:], bk)
		f.Add(disk)
	}
	f.Add(hostileGPT(64<<10, func(h []byte) { binary.LittleEndian.PutUint32(h[84:], 1<<20) }))
	f.Add(hostileGPT(64<<10, func([]byte) {}))
	f.Add(make([]byte, 4096))
	f.Fuzz(func(t *testing.T, b []byte) {
		size := int64(len(b))
		r := &maxReadAt{r: bytes.NewReader(b)}
		tb, err := readGPT(r, 512, size)
		if r.max > gptMaxEntryArray {
			t.Fatalf("read of %d bytes", r.max)
		}
		if err != nil {
			return
		}
		for _, p := range tb.Partitions {
			s, e := p.byteRange(512)
			if s < 0 || e <= s || e > size {
				t.Fatalf("partition %+v: bytes %d-%d on a %d-byte disk", p, s, e, size)
			}
		}
		classifyDisk(bytes.NewReader(b), 512, size)
	})
}

// TestInstallSinkBoundsStream: the download may not announce, or send,
// more bytes than the target disk holds; before, an endless stream was
// hashed forever and a huge Content-Length was accepted.
func TestInstallSinkBoundsStream(t *testing.T) {
	img := testImage(t, 1<<20)
	size := int64(len(img)) + 1<<20
	disk := newDisk(t, size)
	s := &installSink{disk: disk, sectorSize: 512, size: size, logf: t.Logf}
	if _, err := s.begin(size + 1); err == nil || !strings.Contains(err.Error(), "larger than the target disk") {
		t.Errorf("announced length past the disk: %v", err)
	}
	w, err := s.begin(-1) // unknown length
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(img); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 1<<20)); err != nil {
		t.Fatalf("up to the disk's size: %v", err)
	}
	if _, err := w.Write([]byte{0}); err == nil || !strings.Contains(err.Error(), "longer than the target disk") {
		t.Errorf("a byte past the disk: %v", err)
	}
	// A retry starts over.
	if w, err = s.begin(int64(len(img))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(img); err != nil {
		t.Errorf("after begin: %v", err)
	}
}

// TestInstallSinkRefusesHostileImageGPT: the image's first MiB is not yet
// verified when the installer reads its GPT; a hostile entry size there is
// refused before allocating, and nothing is written to the disk.
func TestInstallSinkRefusesHostileImageGPT(t *testing.T) {
	const size = 64 << 20
	disk := newDisk(t, size)
	s := &installSink{disk: disk, sectorSize: 512, size: size, logf: t.Logf}
	w, err := s.begin(-1)
	if err != nil {
		t.Fatal(err)
	}
	head := hostileGPT(imageHeaderLen, func(h []byte) {
		binary.LittleEndian.PutUint32(h[80:], 1024)
		binary.LittleEndian.PutUint32(h[84:], 1<<20)
	})
	if _, err := w.Write(head); err == nil || !strings.Contains(err.Error(), "the image's partition table") || !strings.Contains(err.Error(), "entry size 1048576") {
		t.Errorf("err = %v", err)
	}
	if s.plan != nil {
		t.Error("a plan was made")
	}
	got := make([]byte, 64<<10)
	disk.ReadAt(got, 0)
	if !bytes.Equal(got, make([]byte, len(got))) {
		t.Error("the disk was written")
	}
}
