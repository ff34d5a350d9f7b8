package pid1

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strings"
	"unicode/utf16"
)

// A minimal GPT (UEFI spec, chapter 5) reader and writer: enough to read the
// disk image's table, keep a preserved partition and write a new table.

const (
	gptSignature   = "EFI PART"
	gptHeaderSize  = 92
	gptEntrySize   = 128
	gptNumEntries  = 128
	gptRevision    = 0x00010000
	gptNameUnits   = 36 // UTF-16 code units in a partition name
	mbrSignatureLo = 0x55
	mbrSignatureHi = 0xaa

	// Bounds on what a GPT read from a disk or a download may claim, checked
	// before anything is allocated: the spec allows entry sizes of 128 * 2^n
	// only; nothing real uses more than 4096 bytes per entry, more than 1024
	// entries or an array larger than 1 MiB (the usual one is 16 KiB).
	gptMaxEntrySize  = 4096
	gptMaxEntries    = 1024
	gptMaxEntryArray = 1 << 20
	// Logical sector sizes the reader accepts (BLKSSZGET: 512 or 4096 on
	// real disks).
	gptMinSectorSize = 512
	gptMaxSectorSize = 64 << 10
)

// Partition type GUIDs of docs/cmdline.md.
const (
	gptTypeESP     = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"
	gptTypeLinuxVa = "4d21b016-b534-45c2-a9fb-5c16e091fd2d"
)

// Partition names of docs/cmdline.md.
const (
	partLabelESP  = "osb-esp"
	partLabelRoot = "osb-root"
	partLabelData = "osb-data"
)

// guid is a GUID in its on-disk byte order (the first three fields little
// endian).
type guid [16]byte

func (g guid) String() string {
	return fmt.Sprintf("%08x-%04x-%04x-%x-%x",
		binary.LittleEndian.Uint32(g[0:4]), binary.LittleEndian.Uint16(g[4:6]),
		binary.LittleEndian.Uint16(g[6:8]), g[8:10], g[10:16])
}

func (g guid) isZero() bool { return g == guid{} }

func parseGUID(s string) (guid, error) {
	var g guid
	raw, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(raw) != 16 || len(s) != 36 {
		return g, fmt.Errorf("bad GUID %q", s)
	}
	copy(g[:], raw)
	// The first three fields are stored little endian.
	g[0], g[1], g[2], g[3] = raw[3], raw[2], raw[1], raw[0]
	g[4], g[5] = raw[5], raw[4]
	g[6], g[7] = raw[7], raw[6]
	return g, nil
}

func mustGUID(s string) guid {
	g, err := parseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// gptPartition is one used entry of a partition table.
type gptPartition struct {
	Index    int // 1-based slot in the entry array
	Type     guid
	GUID     guid
	FirstLBA uint64
	LastLBA  uint64 // inclusive
	Attrs    uint64
	Name     string
}

// gptTable is a partition table for a disk with a given sector size.
type gptTable struct {
	SectorSize int
	DiskGUID   guid
	Partitions []gptPartition
}

// byName returns the partition named name, or nil.
func (t *gptTable) byName(name string) *gptPartition {
	for i := range t.Partitions {
		if t.Partitions[i].Name == name {
			return &t.Partitions[i]
		}
	}
	return nil
}

// byteRange returns the partition's [start, end) in bytes.
func (p *gptPartition) byteRange(sectorSize int) (int64, int64) {
	s := int64(sectorSize)
	return int64(p.FirstLBA) * s, (int64(p.LastLBA) + 1) * s
}

var errNoGPT = errors.New("no GPT")

// readGPT reads the table of a disk of size bytes: the primary, or the
// backup at the end when the primary is damaged.
func readGPT(r io.ReaderAt, sectorSize int, size int64) (*gptTable, error) {
	if size < 2*int64(sectorSize) {
		return nil, errNoGPT // too small to hold a header at LBA 1
	}
	t, err := readGPTAt(r, sectorSize, 1)
	if err == nil {
		err = t.checkFits(size)
	}
	if err == nil {
		return t, nil
	}
	primaryErr := err
	sectors := size / int64(max(sectorSize, 1))
	if sectors < 3 {
		return nil, primaryErr
	}
	if t, err := readGPTAt(r, sectorSize, uint64(sectors-1)); err == nil && t.checkFits(size) == nil {
		return t, nil
	}
	return nil, primaryErr
}

// checkFits says whether every partition lies on a disk of size bytes.
func (t *gptTable) checkFits(size int64) error {
	sectors := uint64(size / int64(t.SectorSize))
	for _, p := range t.Partitions {
		if p.LastLBA >= sectors {
			return fmt.Errorf("GPT entry %d (%q) ends at LBA %d, past the end of the disk (%d sectors)", p.Index, p.Name, p.LastLBA, sectors)
		}
	}
	return nil
}

// readGPTAt reads and checks the GPT header at lba and its entries.
func readGPTAt(r io.ReaderAt, sectorSize int, lba uint64) (*gptTable, error) {
	if sectorSize < gptMinSectorSize || sectorSize > gptMaxSectorSize || sectorSize&(sectorSize-1) != 0 {
		return nil, fmt.Errorf("read GPT: bad sector size %d", sectorSize)
	}
	// Offsets must fit an int64: lba comes from the disk's size or header.
	maxLBA := uint64(math.MaxInt64/sectorSize) - 1
	if lba > maxLBA {
		return nil, fmt.Errorf("read GPT header: LBA %d is out of range", lba)
	}
	hdr := make([]byte, sectorSize)
	if _, err := r.ReadAt(hdr, int64(lba)*int64(sectorSize)); err != nil {
		return nil, fmt.Errorf("read GPT header at LBA %d: %w", lba, err)
	}
	if string(hdr[:8]) != gptSignature {
		return nil, errNoGPT
	}
	hsize := binary.LittleEndian.Uint32(hdr[12:])
	if hsize < gptHeaderSize || int(hsize) > sectorSize {
		return nil, fmt.Errorf("GPT header at LBA %d: bad size %d", lba, hsize)
	}
	h := append([]byte(nil), hdr[:hsize]...)
	wantCRC := binary.LittleEndian.Uint32(h[16:])
	binary.LittleEndian.PutUint32(h[16:], 0)
	if crc32.ChecksumIEEE(h) != wantCRC {
		return nil, fmt.Errorf("GPT header at LBA %d: bad checksum", lba)
	}
	if binary.LittleEndian.Uint64(h[24:]) != lba {
		return nil, fmt.Errorf("GPT header at LBA %d says it is at LBA %d", lba, binary.LittleEndian.Uint64(h[24:]))
	}
	entriesLBA := binary.LittleEndian.Uint64(h[72:])
	n := binary.LittleEndian.Uint32(h[80:])
	esize := binary.LittleEndian.Uint32(h[84:])
	// Everything below is bounded before the entry array is allocated: the
	// header's CRC proves nothing, anyone can compute it.
	if esize < gptEntrySize || esize > gptMaxEntrySize || esize&(esize-1) != 0 {
		return nil, fmt.Errorf("GPT at LBA %d: entry size %d (want 128 * 2^n, at most %d)", lba, esize, gptMaxEntrySize)
	}
	if n == 0 || n > gptMaxEntries || uint64(n)*uint64(esize) > gptMaxEntryArray {
		return nil, fmt.Errorf("GPT at LBA %d: %d entries of %d bytes (at most %d entries, %d bytes)", lba, n, esize, gptMaxEntries, gptMaxEntryArray)
	}
	arrayLen := int(n) * int(esize)
	if entriesLBA > maxLBA-uint64(arrayLen/sectorSize+1) {
		return nil, fmt.Errorf("GPT at LBA %d: entry array at LBA %d is out of range", lba, entriesLBA)
	}
	entries := make([]byte, arrayLen)
	if _, err := r.ReadAt(entries, int64(entriesLBA)*int64(sectorSize)); err != nil {
		return nil, fmt.Errorf("read GPT entries at LBA %d: %w", entriesLBA, err)
	}
	if crc32.ChecksumIEEE(entries) != binary.LittleEndian.Uint32(h[88:]) {
		return nil, fmt.Errorf("GPT at LBA %d: bad entry array checksum", lba)
	}
	t := &gptTable{SectorSize: sectorSize}
	copy(t.DiskGUID[:], h[56:72])
	for i := 0; i < int(n); i++ {
		e := entries[i*int(esize) : i*int(esize)+gptEntrySize]
		var p gptPartition
		copy(p.Type[:], e[0:16])
		if p.Type.isZero() {
			continue
		}
		p.Index = i + 1
		copy(p.GUID[:], e[16:32])
		p.FirstLBA = binary.LittleEndian.Uint64(e[32:])
		p.LastLBA = binary.LittleEndian.Uint64(e[40:])
		p.Attrs = binary.LittleEndian.Uint64(e[48:])
		if p.FirstLBA > p.LastLBA || p.LastLBA > maxLBA {
			return nil, fmt.Errorf("GPT at LBA %d: entry %d spans LBA %d-%d", lba, p.Index, p.FirstLBA, p.LastLBA)
		}
		u := make([]uint16, gptNameUnits)
		for j := range u {
			u[j] = binary.LittleEndian.Uint16(e[56+2*j:])
		}
		for len(u) > 0 && u[len(u)-1] == 0 {
			u = u[:len(u)-1]
		}
		p.Name = string(utf16.Decode(u))
		t.Partitions = append(t.Partitions, p)
	}
	return t, nil
}

// entrySectors is the size of the entry array in sectors.
func (t *gptTable) entrySectors() uint64 {
	return uint64((gptNumEntries*gptEntrySize + t.SectorSize - 1) / t.SectorSize)
}

// usable returns the first and last LBA partitions may use on a disk of
// size bytes.
func (t *gptTable) usable(size int64) (first, last uint64) {
	sectors := uint64(size / int64(t.SectorSize))
	return 2 + t.entrySectors(), sectors - 2 - t.entrySectors()
}

// encode returns the table's two copies for a disk of size bytes: the
// primary (protective MBR, header, entries) for offset 0 and the backup
// (entries, header) for offset backupOff.
func (t *gptTable) encode(size int64) (primary, backup []byte, backupOff int64, err error) {
	ss := t.SectorSize
	sectors := uint64(size / int64(ss))
	first, last := t.usable(size)
	if sectors < 2*(2+t.entrySectors())+1 {
		return nil, nil, 0, fmt.Errorf("disk of %d bytes is too small for a GPT", size)
	}
	entries := make([]byte, gptNumEntries*gptEntrySize)
	seen := map[int]bool{}
	for _, p := range t.Partitions {
		if p.Index < 1 || p.Index > gptNumEntries || seen[p.Index] {
			return nil, nil, 0, fmt.Errorf("partition %q: bad or duplicate index %d", p.Name, p.Index)
		}
		seen[p.Index] = true
		if p.FirstLBA < first || p.LastLBA > last || p.FirstLBA > p.LastLBA {
			return nil, nil, 0, fmt.Errorf("partition %q (LBA %d-%d) is outside the usable LBAs %d-%d", p.Name, p.FirstLBA, p.LastLBA, first, last)
		}
		for _, q := range t.Partitions {
			if q.Index != p.Index && p.FirstLBA <= q.LastLBA && q.FirstLBA <= p.LastLBA {
				return nil, nil, 0, fmt.Errorf("partitions %q and %q overlap", p.Name, q.Name)
			}
		}
		u := utf16.Encode([]rune(p.Name))
		if len(u) > gptNameUnits {
			return nil, nil, 0, fmt.Errorf("partition name %q is too long", p.Name)
		}
		e := entries[(p.Index-1)*gptEntrySize:]
		copy(e[0:16], p.Type[:])
		copy(e[16:32], p.GUID[:])
		binary.LittleEndian.PutUint64(e[32:], p.FirstLBA)
		binary.LittleEndian.PutUint64(e[40:], p.LastLBA)
		binary.LittleEndian.PutUint64(e[48:], p.Attrs)
		for j, c := range u {
			binary.LittleEndian.PutUint16(e[56+2*j:], c)
		}
	}
	entriesCRC := crc32.ChecksumIEEE(entries)
	header := func(self, other, entriesLBA uint64) []byte {
		h := make([]byte, ss)
		copy(h, gptSignature)
		binary.LittleEndian.PutUint32(h[8:], gptRevision)
		binary.LittleEndian.PutUint32(h[12:], gptHeaderSize)
		binary.LittleEndian.PutUint64(h[24:], self)
		binary.LittleEndian.PutUint64(h[32:], other)
		binary.LittleEndian.PutUint64(h[40:], first)
		binary.LittleEndian.PutUint64(h[48:], last)
		copy(h[56:72], t.DiskGUID[:])
		binary.LittleEndian.PutUint64(h[72:], entriesLBA)
		binary.LittleEndian.PutUint32(h[80:], gptNumEntries)
		binary.LittleEndian.PutUint32(h[84:], gptEntrySize)
		binary.LittleEndian.PutUint32(h[88:], entriesCRC)
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:gptHeaderSize]))
		return h
	}
	es := int(t.entrySectors()) * ss
	primary = make([]byte, 2*ss+es)
	// Protective MBR: one partition of type 0xEE covering the disk.
	mbr := primary[:ss]
	pe := mbr[446:]
	pe[1], pe[2], pe[3] = 0x00, 0x02, 0x00 // CHS of LBA 1
	pe[4] = 0xee
	pe[5], pe[6], pe[7] = 0xff, 0xff, 0xff
	binary.LittleEndian.PutUint32(pe[8:], 1)
	binary.LittleEndian.PutUint32(pe[12:], uint32(min(sectors-1, 0xffffffff)))
	mbr[510], mbr[511] = mbrSignatureLo, mbrSignatureHi
	copy(primary[ss:], header(1, sectors-1, 2))
	copy(primary[2*ss:], entries)

	backup = make([]byte, es+ss)
	copy(backup, entries)
	backupEntries := sectors - 1 - t.entrySectors()
	copy(backup[es:], header(sectors-1, 1, backupEntries))
	return primary, backup, int64(backupEntries) * int64(ss), nil
}

// diskKind is what a disk holds before an install.
type diskKind int

const (
	diskBlank   diskKind = iota // no partition table, no known signature
	diskOurs                    // a GPT whose partitions are all osb-*
	diskForeign                 // anything else
)

func (k diskKind) String() string {
	return [...]string{"blank", "an os-builder disk", "foreign"}[k]
}

// classifyDisk looks at a disk's partition table, or without one at the
// signatures at both ends (signatures.go), and says what it holds; for
// diskForeign the reason says why. A valid GPT decides alone: content at
// the end of the disk then lies in a partition (osb-data runs to the end)
// and may be anything, a stale md superblock included.
func classifyDisk(r io.ReaderAt, sectorSize int, size int64) (diskKind, *gptTable, string, error) {
	t, err := readGPT(r, sectorSize, size)
	if err == nil {
		var foreign []string
		for _, p := range t.Partitions {
			if !strings.HasPrefix(p.Name, "osb-") {
				foreign = append(foreign, fmt.Sprintf("%d:%q", p.Index, p.Name))
			}
		}
		if len(foreign) > 0 {
			return diskForeign, t, "its GPT has partitions not made by os-builder: " + strings.Join(foreign, " "), nil
		}
		return diskOurs, t, "", nil
	}
	if !errors.Is(err, errNoGPT) {
		return diskForeign, nil, "it has a damaged GPT (" + err.Error() + ")", nil
	}
	d, err := newDiskProbe(r, size)
	if err != nil {
		return 0, nil, "", err
	}
	reason := foreignContent(d)
	if d.err != nil {
		return 0, nil, "", fmt.Errorf("read the disk's signatures: %w", d.err)
	}
	if reason != "" {
		return diskForeign, nil, reason, nil
	}
	return diskBlank, nil, "", nil
}
