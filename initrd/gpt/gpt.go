// Package gpt reads and writes GUID partition tables (UEFI spec, chapter
// 5): enough for the init to read a disk image's table, keep a preserved
// partition and write a new table. Tables come from disks and downloads:
// every size a header claims is bounded before anything is allocated.
package gpt

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

// The on-disk format this package writes, and the bounds it reads within.
const (
	Signature      = "EFI PART"
	HeaderSize     = 92
	EntrySize      = 128
	NumEntries     = 128
	Revision       = 0x00010000
	NameUnits      = 36 // UTF-16 code units in a partition name
	mbrSignatureLo = 0x55
	mbrSignatureHi = 0xaa

	// Bounds on what a GPT read from a disk or a download may claim, checked
	// before anything is allocated: the spec allows entry sizes of 128 * 2^n
	// only; nothing real uses more than 4096 bytes per entry, more than 1024
	// entries or an array larger than 1 MiB (the usual one is 16 KiB).
	MaxEntrySize  = 4096
	MaxEntries    = 1024
	MaxEntryArray = 1 << 20
	// Logical sector sizes the reader accepts (BLKSSZGET: 512 or 4096 on
	// real disks).
	MinSectorSize = 512
	MaxSectorSize = 64 << 10
)

// Partition type GUIDs the os-builder disk uses (docs/cmdline.md): the EFI
// system partition and Linux variable data (the root and osb-data).
const (
	TypeESP      = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"
	TypeLinuxVar = "4d21b016-b534-45c2-a9fb-5c16e091fd2d"
)

// GUID is a GUID in its on-disk byte order (the first three fields little
// endian).
type GUID [16]byte

func (g GUID) String() string {
	return fmt.Sprintf("%08x-%04x-%04x-%x-%x",
		binary.LittleEndian.Uint32(g[0:4]), binary.LittleEndian.Uint16(g[4:6]),
		binary.LittleEndian.Uint16(g[6:8]), g[8:10], g[10:16])
}

// IsZero reports an unused entry's type.
func (g GUID) IsZero() bool { return g == GUID{} }

// ParseGUID parses the text form (8-4-4-4-12 hex digits).
func ParseGUID(s string) (GUID, error) {
	var g GUID
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

// MustGUID is ParseGUID for constants: it panics on a bad one.
func MustGUID(s string) GUID {
	g, err := ParseGUID(s)
	if err != nil {
		panic(err)
	}
	return g
}

// Partition is one used entry of a partition table.
type Partition struct {
	Index    int // 1-based slot in the entry array
	Type     GUID
	GUID     GUID
	FirstLBA uint64
	LastLBA  uint64 // inclusive
	Attrs    uint64
	Name     string
}

// Table is a partition table for a disk with a given sector size.
type Table struct {
	SectorSize int
	DiskGUID   GUID
	Partitions []Partition
}

// ByName returns the partition named name, or nil.
func (t *Table) ByName(name string) *Partition {
	for i := range t.Partitions {
		if t.Partitions[i].Name == name {
			return &t.Partitions[i]
		}
	}
	return nil
}

// ByteRange returns the partition's [start, end) in bytes.
func (p *Partition) ByteRange(sectorSize int) (int64, int64) {
	s := int64(sectorSize)
	return int64(p.FirstLBA) * s, (int64(p.LastLBA) + 1) * s
}

// ErrNoGPT: there is no GPT signature where a header belongs.
var ErrNoGPT = errors.New("no GPT")

// Read reads the table of a disk of size bytes: the primary, or the
// backup at the end when the primary is damaged. Whoever decides whether a
// disk is still what its table says must not take the backup's word alone
// (a disk overwritten from the start keeps it): see ReadPrimary and
// ReadBackup.
func Read(r io.ReaderAt, sectorSize int, size int64) (*Table, error) {
	t, err := ReadPrimary(r, sectorSize, size)
	if err == nil {
		return t, nil
	}
	if t, berr := ReadBackup(r, sectorSize, size); berr == nil {
		return t, nil
	}
	return nil, err
}

// ReadPrimary reads the primary table, at LBA 1, of a disk of size bytes;
// ErrNoGPT when there is no GPT signature there.
func ReadPrimary(r io.ReaderAt, sectorSize int, size int64) (*Table, error) {
	if size < 2*int64(sectorSize) {
		return nil, ErrNoGPT // too small to hold a header at LBA 1
	}
	return readFitting(r, sectorSize, 1, size)
}

// ReadBackup reads the backup table, at the last LBA, of a disk of size
// bytes; ErrNoGPT when there is no GPT signature there.
func ReadBackup(r io.ReaderAt, sectorSize int, size int64) (*Table, error) {
	sectors := size / int64(max(sectorSize, 1))
	if sectors < 3 {
		return nil, ErrNoGPT // no room for a backup apart from the primary
	}
	return readFitting(r, sectorSize, uint64(sectors-1), size)
}

// readFitting is ReadAt for a disk of size bytes: every partition must lie
// on it.
func readFitting(r io.ReaderAt, sectorSize int, lba uint64, size int64) (*Table, error) {
	t, err := ReadAt(r, sectorSize, lba)
	if err != nil {
		return nil, err
	}
	if err := t.checkFits(size); err != nil {
		return nil, err
	}
	return t, nil
}

// checkFits says whether every partition lies on a disk of size bytes.
func (t *Table) checkFits(size int64) error {
	sectors := uint64(size / int64(t.SectorSize))
	for _, p := range t.Partitions {
		if p.LastLBA >= sectors {
			return fmt.Errorf("GPT entry %d (%q) ends at LBA %d, past the end of the disk (%d sectors)", p.Index, p.Name, p.LastLBA, sectors)
		}
	}
	return nil
}

// ReadAt reads and checks the GPT header at lba and its entries.
func ReadAt(r io.ReaderAt, sectorSize int, lba uint64) (*Table, error) {
	if sectorSize < MinSectorSize || sectorSize > MaxSectorSize || sectorSize&(sectorSize-1) != 0 {
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
	if string(hdr[:8]) != Signature {
		return nil, ErrNoGPT
	}
	hsize := binary.LittleEndian.Uint32(hdr[12:])
	if hsize < HeaderSize || int(hsize) > sectorSize {
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
	if esize < EntrySize || esize > MaxEntrySize || esize&(esize-1) != 0 {
		return nil, fmt.Errorf("GPT at LBA %d: entry size %d (want 128 * 2^n, at most %d)", lba, esize, MaxEntrySize)
	}
	if n == 0 || n > MaxEntries || uint64(n)*uint64(esize) > MaxEntryArray {
		return nil, fmt.Errorf("GPT at LBA %d: %d entries of %d bytes (at most %d entries, %d bytes)", lba, n, esize, MaxEntries, MaxEntryArray)
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
	t := &Table{SectorSize: sectorSize}
	copy(t.DiskGUID[:], h[56:72])
	for i := 0; i < int(n); i++ {
		e := entries[i*int(esize) : i*int(esize)+EntrySize]
		var p Partition
		copy(p.Type[:], e[0:16])
		if p.Type.IsZero() {
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
		u := make([]uint16, NameUnits)
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
func (t *Table) entrySectors() uint64 {
	return uint64((NumEntries*EntrySize + t.SectorSize - 1) / t.SectorSize)
}

// Usable returns the first and last LBA partitions may use on a disk of
// size bytes.
func (t *Table) Usable(size int64) (first, last uint64) {
	sectors := uint64(size / int64(t.SectorSize))
	return 2 + t.entrySectors(), sectors - 2 - t.entrySectors()
}

// Encode returns the table's two copies for a disk of size bytes: the
// primary (protective MBR, header, entries) for offset 0 and the backup
// (entries, header) for offset backupOff.
func (t *Table) Encode(size int64) (primary, backup []byte, backupOff int64, err error) {
	ss := t.SectorSize
	sectors := uint64(size / int64(ss))
	first, last := t.Usable(size)
	if sectors < 2*(2+t.entrySectors())+1 {
		return nil, nil, 0, fmt.Errorf("disk of %d bytes is too small for a GPT", size)
	}
	entries := make([]byte, NumEntries*EntrySize)
	seen := map[int]bool{}
	for _, p := range t.Partitions {
		if p.Index < 1 || p.Index > NumEntries || seen[p.Index] {
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
		if len(u) > NameUnits {
			return nil, nil, 0, fmt.Errorf("partition name %q is too long", p.Name)
		}
		e := entries[(p.Index-1)*EntrySize:]
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
		copy(h, Signature)
		binary.LittleEndian.PutUint32(h[8:], Revision)
		binary.LittleEndian.PutUint32(h[12:], HeaderSize)
		binary.LittleEndian.PutUint64(h[24:], self)
		binary.LittleEndian.PutUint64(h[32:], other)
		binary.LittleEndian.PutUint64(h[40:], first)
		binary.LittleEndian.PutUint64(h[48:], last)
		copy(h[56:72], t.DiskGUID[:])
		binary.LittleEndian.PutUint64(h[72:], entriesLBA)
		binary.LittleEndian.PutUint32(h[80:], NumEntries)
		binary.LittleEndian.PutUint32(h[84:], EntrySize)
		binary.LittleEndian.PutUint32(h[88:], entriesCRC)
		binary.LittleEndian.PutUint32(h[16:], crc32.ChecksumIEEE(h[:HeaderSize]))
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
