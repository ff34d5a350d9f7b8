package gpt_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	diskfsgpt "github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/ironcore-dev/os-builder/initrd/gpt"
	"github.com/ironcore-dev/os-builder/initrd/gpt/gpttest"
)

func TestGUID(t *testing.T) {
	g := gpt.MustGUID(gpt.TypeESP)
	if g.String() != gpt.TypeESP {
		t.Errorf("round trip: %s", g)
	}
	if g[0] != 0x28 || g[3] != 0xc1 || g[8] != 0xba { // on-disk byte order
		t.Errorf("byte order: % x", g)
	}
	for _, bad := range []string{"", "c12a7328-f81f-11d2-ba4b-00a0c93ec93", "x12a7328-f81f-11d2-ba4b-00a0c93ec93b"} {
		if _, err := gpt.ParseGUID(bad); err == nil {
			t.Errorf("ParseGUID(%q) succeeded", bad)
		}
	}
}

// TestReadDiskImage reads what diskimage (go-diskfs) writes.
func TestReadDiskImage(t *testing.T) {
	img := gpttest.DiskImage(t, 3<<20)
	tb, err := gpt.Read(bytes.NewReader(img), 512, int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.Partitions) != 2 {
		t.Fatalf("partitions %+v", tb.Partitions)
	}
	esp, root := tb.ByName("osb-esp"), tb.ByName("osb-root")
	if esp == nil || root == nil || esp.Type.String() != gpt.TypeESP || root.Attrs != 1<<60 || esp.FirstLBA != 2048 {
		t.Errorf("partitions %+v", tb.Partitions)
	}
	// A damaged primary falls back to the backup.
	broken := append([]byte(nil), img...)
	broken[512+20] ^= 0xff
	tb2, err := gpt.Read(bytes.NewReader(broken), 512, int64(len(broken)))
	if err != nil || len(tb2.Partitions) != 2 {
		t.Errorf("backup: %v %+v", err, tb2)
	}
}

// TestReadPrimaryAndBackup: each copy is read on its own, so a caller can
// tell a disk whose primary is gone from one with both (Read falls back to
// the backup and cannot).
func TestReadPrimaryAndBackup(t *testing.T) {
	const size = 8 << 20
	whole := make([]byte, size)
	gpttest.WriteTable(t, sliceWriter(whole), gpttest.Installed(512, size), size)
	noPrimary := append([]byte(nil), whole...)
	copy(noPrimary[512:1024], make([]byte, 512))
	damaged := append([]byte(nil), whole...)
	damaged[512+40] ^= 1
	noBackup := append([]byte(nil), whole...)
	copy(noBackup[size-512:], make([]byte, 512))
	for _, tc := range []struct {
		name                      string
		disk                      []byte
		primary, backup, fallback string // "" for a table, else the error
	}{
		{"both", whole, "", "", ""},
		{"primary header zeroed", noPrimary, "no GPT", "", ""},
		{"primary damaged", damaged, "bad checksum", "", ""},
		{"backup header zeroed", noBackup, "", "no GPT", ""},
		{"blank", make([]byte, size), "no GPT", "no GPT", "no GPT"},
		{"one sector", make([]byte, 512), "no GPT", "no GPT", "no GPT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bytes.NewReader(tc.disk)
			for _, c := range []struct {
				what string
				read func(io.ReaderAt, int, int64) (*gpt.Table, error)
				want string
			}{{"primary", gpt.ReadPrimary, tc.primary}, {"backup", gpt.ReadBackup, tc.backup}, {"Read", gpt.Read, tc.fallback}} {
				tb, err := c.read(r, 512, int64(len(tc.disk)))
				switch {
				case c.want == "" && (err != nil || len(tb.Partitions) != 3):
					t.Errorf("%s: %v", c.what, err)
				case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
					t.Errorf("%s: err = %v, want %q", c.what, err, c.want)
				}
			}
		})
	}
}

// sliceWriter writes into a byte slice.
type sliceWriter []byte

func (w sliceWriter) WriteAt(p []byte, off int64) (int, error) { return copy(w[off:], p), nil }

// TestEncodeReadByGoDiskfs checks our tables with an independent reader.
func TestEncodeReadByGoDiskfs(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		size := int64(64 << 20)
		tb := &gpt.Table{SectorSize: ss, DiskGUID: gpt.MustGUID("11111111-2222-3333-4444-555555555555"), Partitions: []gpt.Partition{
			{Index: 1, Type: gpt.MustGUID(gpt.TypeESP), GUID: gpt.MustGUID("aaaaaaaa-2222-3333-4444-555555555555"), FirstLBA: uint64(1 << 20 / ss), LastLBA: uint64(9<<20/ss) - 1, Name: "osb-esp"},
			{Index: 3, Type: gpt.MustGUID(gpt.TypeLinuxVar), GUID: gpt.MustGUID("bbbbbbbb-2222-3333-4444-555555555555"), FirstLBA: uint64(32 << 20 / ss), LastLBA: uint64(60<<20/ss) - 1, Attrs: 1 << 60, Name: "osb-data"},
		}}
		primary, backup, off, err := tb.Encode(size)
		if err != nil {
			t.Fatal(err)
		}
		disk := make([]byte, size)
		copy(disk, primary)
		copy(disk[off:], backup)
		df := filepath.Join(t.TempDir(), "disk")
		if err := os.WriteFile(df, disk, 0o644); err != nil {
			t.Fatal(err)
		}
		fh, err := os.Open(df)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		got, err := diskfsgpt.Read(fh, ss, ss)
		if err != nil {
			t.Fatalf("%d: go-diskfs: %v", ss, err)
		}
		var names []string
		for _, p := range got.Partitions {
			if p.Name != "" {
				names = append(names, p.Name)
			}
		}
		if strings.Join(names, ",") != "osb-esp,osb-data" {
			t.Errorf("%d: go-diskfs sees %v", ss, names)
		}
		back, err := gpt.Read(bytes.NewReader(disk), ss, size)
		if err != nil {
			t.Fatal(err)
		}
		if back.Partitions[1].Index != 3 || back.Partitions[1].Attrs != 1<<60 || back.DiskGUID != tb.DiskGUID {
			t.Errorf("%d: round trip %+v", ss, back)
		}
		// The backup alone is enough.
		copy(disk[:2*ss], make([]byte, 2*ss))
		if _, err := gpt.Read(bytes.NewReader(disk), ss, size); err != nil {
			t.Errorf("%d: backup only: %v", ss, err)
		}
	}
	bad := &gpt.Table{SectorSize: 512, Partitions: []gpt.Partition{
		{Index: 1, Type: gpt.MustGUID(gpt.TypeESP), FirstLBA: 2048, LastLBA: 4095, Name: "a"},
		{Index: 2, Type: gpt.MustGUID(gpt.TypeESP), FirstLBA: 4000, LastLBA: 5000, Name: "b"},
	}}
	if _, _, _, err := bad.Encode(8 << 20); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("overlap: %v", err)
	}
}

// TestEncodeRefusals: a table that cannot be written says which partition
// and why.
func TestEncodeRefusals(t *testing.T) {
	esp := gpt.MustGUID(gpt.TypeESP)
	for _, tc := range []struct {
		name  string
		size  int64
		parts []gpt.Partition
		want  string
	}{
		{"disk too small", 16 << 10, nil, "too small for a GPT"},
		{"index 0", 8 << 20, []gpt.Partition{{Index: 0, Type: esp, FirstLBA: 2048, LastLBA: 4095, Name: "a"}}, "bad or duplicate index 0"},
		{"duplicate index", 8 << 20, []gpt.Partition{{Index: 1, Type: esp, FirstLBA: 2048, LastLBA: 4095, Name: "a"}, {Index: 1, Type: esp, FirstLBA: 4096, LastLBA: 8191, Name: "b"}}, "duplicate index 1"},
		{"past the usable end", 8 << 20, []gpt.Partition{{Index: 1, Type: esp, FirstLBA: 2048, LastLBA: 16383, Name: "a"}}, "outside the usable LBAs"},
		{"name too long", 8 << 20, []gpt.Partition{{Index: 1, Type: esp, FirstLBA: 2048, LastLBA: 4095, Name: strings.Repeat("n", gpt.NameUnits+1)}}, "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := &gpt.Table{SectorSize: 512, Partitions: tc.parts}
			if _, _, _, err := tb.Encode(tc.size); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestReadBoundsSizes feeds headers with valid CRCs and hostile sizes:
// each is refused with an error naming the field, and no read (no
// allocation) is larger than the bound. Before the bounds, entry sizes up
// to 4 GiB times 1024 entries were allocated as claimed.
func TestReadBoundsSizes(t *testing.T) {
	const size = 4 << 20
	for _, tc := range gpttest.HostileHeaders() {
		t.Run(tc.Name, func(t *testing.T) {
			r := &gpttest.MaxReadAt{R: bytes.NewReader(gpttest.Hostile(size, tc.Edit))}
			_, err := gpt.Read(r, 512, size)
			if err == nil || !strings.Contains(err.Error(), tc.Want) {
				t.Errorf("err = %v, want it to name %q", err, tc.Want)
			}
			if r.Max > gpt.MaxEntryArray {
				t.Errorf("a read of %d bytes: more than the %d-byte bound was allocated", r.Max, gpt.MaxEntryArray)
			}
		})
	}
	// The largest array the bounds allow is read.
	ok := gpttest.Hostile(size, func(h []byte) {
		binary.LittleEndian.PutUint32(h[84:], 1024)
		binary.LittleEndian.PutUint32(h[80:], 1024)
	})
	binary.LittleEndian.PutUint32(ok[512+88:], crc32.ChecksumIEEE(ok[1024:1024+1<<20]))
	gpttest.Reseal(ok[512 : 512+gpt.HeaderSize])
	if _, err := gpt.Read(bytes.NewReader(ok), 512, size); err != nil {
		t.Errorf("1024 entries of 1024 bytes: %v", err)
	}
}

// TestReadBoundsPartitions: entries whose LBAs overflow a byte offset or
// lie past the end of the disk make the table damaged, not trusted.
func TestReadBoundsPartitions(t *testing.T) {
	img := gpttest.DiskImage(t, 1<<20)
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
			tb, err := gpt.Read(bytes.NewReader(img), 512, size)
			if err != nil {
				t.Fatal(err)
			}
			// Write the bad entry with valid CRCs, in both copies.
			disk := append([]byte(nil), img...)
			for _, hdrLBA := range []int64{1, size/512 - 1} {
				h := disk[hdrLBA*512 : hdrLBA*512+gpt.HeaderSize]
				entries := int64(binary.LittleEndian.Uint64(h[72:])) * 512
				e := disk[entries : entries+gpt.NumEntries*gpt.EntrySize]
				binary.LittleEndian.PutUint64(e[(tb.Partitions[0].Index-1)*gpt.EntrySize+32:], tc.first)
				binary.LittleEndian.PutUint64(e[(tb.Partitions[0].Index-1)*gpt.EntrySize+40:], tc.last)
				binary.LittleEndian.PutUint32(h[88:], crc32.ChecksumIEEE(e))
				gpttest.Reseal(h)
			}
			if _, err := gpt.Read(bytes.NewReader(disk), 512, size); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestReadTinyDisk: a disk smaller than a GPT is no GPT, not a panic or a
// read at a wrapped-around offset.
func TestReadTinyDisk(t *testing.T) {
	for _, size := range []int64{0, 511, 1024} {
		if _, err := gpt.Read(bytes.NewReader(make([]byte, size)), 512, size); err == nil {
			t.Errorf("size %d: no error", size)
		}
	}
}

// TestReadAtBadSectorSize: only power-of-two sector sizes from 512 bytes
// to 64 KiB are read.
func TestReadAtBadSectorSize(t *testing.T) {
	for _, ss := range []int{0, 256, 520, 128 << 10} {
		if _, err := gpt.ReadAt(bytes.NewReader(make([]byte, 1<<20)), ss, 1); err == nil || !strings.Contains(err.Error(), "bad sector size") {
			t.Errorf("sector size %d: %v", ss, err)
		}
	}
}

// GPT header fields FuzzRead sets (UEFI spec table 5-5), by offset.
const (
	hdrCRC        = 16
	hdrMyLBA      = 24
	hdrEntriesLBA = 72
	hdrNumEntries = 80
	hdrEntrySize  = 84
	hdrEntriesCRC = 88
)

// Flags of FuzzRead's layout argument.
const (
	fuzzAtBackup    = 1 << iota // the header at the last LBA, not LBA 1
	fuzzBadHdrCRC               // the header's CRC is off by one
	fuzzBadArrayCRC             // the entry array's CRC is off by one
	fuzzOwnMyLBA                // MyLBA is the fuzzed value, not where the header is
)

// fuzzDisk builds a disk from FuzzRead's arguments: a GPT header whose
// CRCs are right (unless flags say otherwise) over the fuzzed fields, and
// its entry array, each entry's first 128 bytes from entries.
func fuzzDisk(shift uint8, lbas uint64, flags uint8, hsize uint32, myLBA, entriesLBA uint64, n, esize uint32, entries []byte) (*gpttest.Sparse, int) {
	ss := gpt.MinSectorSize << (shift % 4)
	d := &gpttest.Sparse{Size: int64(lbas%(1<<40)) * int64(ss)}
	at := uint64(1)
	if flags&fuzzAtBackup != 0 {
		at = uint64(d.Size/int64(ss)) - 1
	}
	if flags&fuzzOwnMyLBA == 0 {
		myLBA = at
	}
	// The array as the header describes it, when that is small enough to
	// be read at all: past the bounds, the reader must not look at it.
	var array []byte
	if uint64(n)*uint64(esize) <= 2*gpt.MaxEntryArray && esize >= gpt.EntrySize {
		array = make([]byte, int(n)*int(esize))
		for i := 0; i < int(n) && 128*i < len(entries); i++ {
			copy(array[i*int(esize):i*int(esize)+gpt.EntrySize], entries[128*i:])
		}
		if entriesLBA < 1<<40 {
			d.Put(int64(entriesLBA)*int64(ss), array)
		}
	}
	h := make([]byte, ss)
	copy(h, gpt.Signature)
	binary.LittleEndian.PutUint32(h[8:], gpt.Revision)
	binary.LittleEndian.PutUint32(h[12:], hsize)
	binary.LittleEndian.PutUint64(h[hdrMyLBA:], myLBA)
	binary.LittleEndian.PutUint64(h[hdrEntriesLBA:], entriesLBA)
	binary.LittleEndian.PutUint32(h[hdrNumEntries:], n)
	binary.LittleEndian.PutUint32(h[hdrEntrySize:], esize)
	crc := crc32.ChecksumIEEE(array)
	if flags&fuzzBadArrayCRC != 0 {
		crc++
	}
	binary.LittleEndian.PutUint32(h[hdrEntriesCRC:], crc)
	crc = crc32.ChecksumIEEE(h[:min(int(hsize), ss)])
	if flags&fuzzBadHdrCRC != 0 {
		crc++
	}
	binary.LittleEndian.PutUint32(h[hdrCRC:], crc)
	// The header goes last: it wins where the array overlaps it.
	d.Put(int64(at)*int64(ss), h)
	return d, ss
}

// FuzzRead fuzzes a GPT's header fields and entries, not a disk's bytes:
// fuzzDisk builds the header and array and recomputes both CRCs, so that
// the checks after the CRCs see the fuzzed values (fuzzed whole disks broke
// a CRC with almost every mutation and never got past it). The reader must
// not panic, must not read (allocate) past its bounds, every partition it
// accepts lies on the disk, and a table it accepts and Encode writes reads
// back the same.
func FuzzRead(f *testing.F) {
	// An installed disk's table, as fields.
	for _, ss := range []int{512, 4096} {
		size := int64(64 << 20)
		primary, _, _, err := gpttest.Installed(ss, size).Encode(size)
		if err != nil {
			f.Fatal(err)
		}
		h := primary[ss:]
		field := func(off int) uint32 { return binary.LittleEndian.Uint32(h[off:]) }
		f.Add(uint8(ss/1024), uint64(size)/uint64(ss), uint8(0), field(12), uint64(1), binary.LittleEndian.Uint64(h[hdrEntriesLBA:]), field(hdrNumEntries), field(hdrEntrySize), primary[2*ss:2*ss+3*gpt.EntrySize])
		f.Add(uint8(ss/1024), uint64(size)/uint64(ss), uint8(fuzzAtBackup), field(12), uint64(0), uint64(size)/uint64(ss)-33, field(hdrNumEntries), field(hdrEntrySize), primary[2*ss:2*ss+3*gpt.EntrySize])
	}
	// The hostile headers of TestReadBoundsSizes, as fields.
	for _, hh := range gpttest.HostileHeaders() {
		h := gpttest.Hostile(4<<20, hh.Edit)[512 : 512+gpt.HeaderSize]
		f.Add(uint8(0), uint64(8192), uint8(0), binary.LittleEndian.Uint32(h[12:]), uint64(1), binary.LittleEndian.Uint64(h[hdrEntriesLBA:]),
			binary.LittleEndian.Uint32(h[hdrNumEntries:]), binary.LittleEndian.Uint32(h[hdrEntrySize:]), []byte{})
	}
	f.Fuzz(func(t *testing.T, shift uint8, lbas uint64, flags uint8, hsize uint32, myLBA, entriesLBA uint64, n, esize uint32, entries []byte) {
		d, ss := fuzzDisk(shift, lbas, flags, hsize, myLBA, entriesLBA, n, esize, entries)
		tb, err := gpt.Read(d, ss, d.Size)
		if d.Max > max(gpt.MaxEntryArray, ss) {
			t.Fatalf("read of %d bytes", d.Max)
		}
		if err != nil {
			return
		}
		if flags&(fuzzBadHdrCRC|fuzzBadArrayCRC) != 0 {
			t.Fatalf("a table with a bad CRC was accepted: %+v", tb)
		}
		for _, p := range tb.Partitions {
			s, e := p.ByteRange(ss)
			if s < 0 || e <= s || e > d.Size {
				t.Fatalf("partition %+v: bytes %d-%d on a %d-byte disk", p, s, e, d.Size)
			}
		}
		primary, backup, off, err := tb.Encode(d.Size)
		if err != nil {
			return // e.g. overlapping partitions: refused, not written
		}
		written := &gpttest.Sparse{Size: d.Size}
		written.Put(0, primary)
		written.Put(off, backup)
		again, err := gpt.Read(written, ss, d.Size)
		if err != nil {
			t.Fatalf("reading back what Encode wrote: %v", err)
		}
		if fmt.Sprint(again.Partitions) != fmt.Sprint(tb.Partitions) || again.DiskGUID != tb.DiskGUID {
			t.Fatalf("round trip: %+v, want %+v", again, tb)
		}
	})
}
