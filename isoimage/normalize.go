package isoimage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"
)

// ISO 9660 and El Torito offsets normalize reads or sets.
const (
	vdFirstSector  = 16
	vdTypeBoot     = 0
	vdTypePrimary  = 1
	vdTypeSupp     = 2
	vdTypeEnd      = 255
	pvdVolumeSize  = 80  // both-endian uint32, in blocks
	pvdRootRecord  = 156 // 34-byte directory record
	pvdCreation    = 813 // four 17-byte dates follow
	pvdModified    = 830
	pvdExpiration  = 847
	pvdEffective   = 864
	bootCatalogLBA = 0x47
	recordExtent   = 2  // both-endian uint32: first block
	recordSize     = 10 // both-endian uint32: bytes
	recordDate     = 18 // 7-byte date in a directory record
	recordFlags    = 25
	recordNameLen  = 32
	flagDirectory  = 0x02

	// catalogSectorCount is the default entry's 16-bit count of 512-byte
	// sectors, at offset 6 of the entry (after the validation entry).
	catalogSectorCount = 6
	// catalogLoadRBA is the default entry's block of the boot image, in
	// the entry (offset 8).
	catalogLoadRBA = 8
)

// normalize fixes what go-diskfs v1.9.1 leaves irreproducible in a
// finalized ISO: it stamps time.Now() on the volume descriptor, the boot
// catalog's record and (through the workspace's file times) every other
// record, and it may pad past the volume's end. Every date becomes mtime
// (UTC) and the file the volume's size, which it returns in blocks.
func normalize(f *os.File, mtime time.Time) (int64, error) {
	var volumeBlocks int64
	var root []byte
	for s := int64(vdFirstSector); ; s++ {
		vd := make([]byte, blockSize)
		if _, err := f.ReadAt(vd, s*blockSize); err != nil {
			return 0, fmt.Errorf("reading volume descriptor %d: %w", s, err)
		}
		if !bytes.Equal(vd[1:6], []byte("CD001")) {
			return 0, fmt.Errorf("sector %d is not a volume descriptor", s)
		}
		switch vd[0] {
		case vdTypeSupp:
			// A second tree (Joliet) would keep the extents go-diskfs gave
			// the staged files; the writer places them in the primary one.
			return 0, fmt.Errorf("supplementary volume descriptor at sector %d: not supported", s)
		case vdTypePrimary:
			stamp := longDate(mtime)
			copy(vd[pvdCreation:], stamp)
			copy(vd[pvdModified:], stamp)
			copy(vd[pvdExpiration:], unsetLongDate())
			copy(vd[pvdEffective:], unsetLongDate())
			copy(vd[pvdRootRecord+recordDate:], shortDate(mtime))
			volumeBlocks = int64(binary.LittleEndian.Uint32(vd[pvdVolumeSize:]))
			root = vd[pvdRootRecord : pvdRootRecord+34]
		}
		if _, err := f.WriteAt(vd, s*blockSize); err != nil {
			return 0, fmt.Errorf("writing volume descriptor %d: %w", s, err)
		}
		if vd[0] == vdTypeEnd {
			break
		}
		if s > vdFirstSector+16 {
			return 0, errors.New("no volume descriptor set terminator")
		}
	}
	if root == nil {
		return 0, errors.New("no primary volume descriptor")
	}
	if err := stampTree(f, root, shortDate(mtime)); err != nil {
		return 0, err
	}
	// go-diskfs pads the last file with a whole zero block when it already
	// ends on a block boundary, which lies past the volume.
	return volumeBlocks, f.Truncate(volumeBlocks * blockSize)
}

// setVolumeBlocks sets the primary volume descriptor's volume size.
func setVolumeBlocks(f *os.File, n int64) error {
	if n > math.MaxUint32 {
		return fmt.Errorf("volume of %d blocks is larger than ISO 9660 can describe", n)
	}
	return writeBothEndian(f, vdFirstSector*blockSize+pvdVolumeSize, uint32(n))
}

// setExtent points the directory record of the file at p to size bytes
// from block lba on.
func setExtent(f *os.File, p string, lba, size int64) error {
	off, _, err := findRecord(f, p)
	if err != nil {
		return err
	}
	if lba > math.MaxUint32 || size > math.MaxUint32 {
		return fmt.Errorf("%s: %d bytes at block %d: past what one ISO 9660 extent can describe", p, size, lba)
	}
	if err := writeBothEndian(f, off+recordExtent, uint32(lba)); err != nil {
		return err
	}
	return writeBothEndian(f, off+recordSize, uint32(size))
}

// writeBothEndian writes v little-endian then big-endian at off, as ISO
// 9660 stores its numbers.
func writeBothEndian(f *os.File, off int64, v uint32) error {
	var b [8]byte
	binary.LittleEndian.PutUint32(b[:4], v)
	binary.BigEndian.PutUint32(b[4:], v)
	_, err := f.WriteAt(b[:], off)
	return err
}

// findRecord finds the file at path (e.g. "/EFI/BOOT/BOOTX64.EFI") in the
// ISO 9660 tree of f and returns its directory record and where it is.
func findRecord(f *os.File, p string) (off int64, rec []byte, err error) {
	pvd := make([]byte, blockSize)
	if _, err := f.ReadAt(pvd, vdFirstSector*blockSize); err != nil {
		return 0, nil, fmt.Errorf("reading the primary volume descriptor: %w", err)
	}
	if pvd[0] != vdTypePrimary || !bytes.Equal(pvd[1:6], []byte("CD001")) {
		return 0, nil, errors.New("no primary volume descriptor first")
	}
	rec = pvd[pvdRootRecord : pvdRootRecord+34]
	for _, name := range strings.Split(strings.Trim(p, "/"), "/") {
		dirLBA, dirSize := int64(binary.LittleEndian.Uint32(rec[2:])), int64(binary.LittleEndian.Uint32(rec[10:]))
		if dirSize > maxDirSize {
			return 0, nil, fmt.Errorf("directory at block %d: %d bytes", dirLBA, dirSize)
		}
		buf := make([]byte, dirSize)
		if _, err := f.ReadAt(buf, dirLBA*blockSize); err != nil {
			return 0, nil, fmt.Errorf("reading directory at block %d: %w", dirLBA, err)
		}
		rec = nil
		for i := 0; i < len(buf) && rec == nil; {
			n := int(buf[i])
			if n == 0 {
				i = (i/blockSize + 1) * blockSize
				continue
			}
			if n < 34 || i+n > len(buf) || 33+int(buf[i+recordNameLen]) > n {
				return 0, nil, fmt.Errorf("bad directory record at block %d offset %d", dirLBA, i)
			}
			r := buf[i : i+n]
			got := strings.TrimSuffix(strings.TrimSuffix(string(r[33:33+int(r[recordNameLen])]), ";1"), ".")
			if strings.EqualFold(got, name) {
				rec, off = r, dirLBA*blockSize+int64(i)
			}
			i += n
		}
		if rec == nil {
			return 0, nil, fmt.Errorf("%s: no %s", p, name)
		}
	}
	if rec[recordFlags]&flagDirectory != 0 {
		return 0, nil, fmt.Errorf("%s is a directory", p)
	}
	return off, rec, nil
}

// maxDirSize bounds a directory extent read from an image: ours are a
// block or two.
const maxDirSize = 1 << 20

// setBootImage points the boot catalog's default entry to the boot image
// at block lba, of size bytes. Its sector count is 16 bits of 512-byte
// sectors: a larger image gets 0 (see the package comment).
func setBootImage(f *os.File, lba, size int64) error {
	for s := int64(vdFirstSector); s <= vdFirstSector+16; s++ {
		vd := make([]byte, blockSize)
		if _, err := f.ReadAt(vd, s*blockSize); err != nil {
			return fmt.Errorf("reading volume descriptor %d: %w", s, err)
		}
		switch {
		case !bytes.Equal(vd[1:6], []byte("CD001")):
			return fmt.Errorf("sector %d is not a volume descriptor", s)
		case vd[0] == vdTypeEnd:
			return errors.New("no El Torito boot record")
		case vd[0] != vdTypeBoot || !bytes.HasPrefix(vd[7:], []byte("EL TORITO SPECIFICATION")):
			continue
		}
		entry := make([]byte, 32)
		at := int64(binary.LittleEndian.Uint32(vd[bootCatalogLBA:]))*blockSize + 32
		if _, err := f.ReadAt(entry, at); err != nil {
			return fmt.Errorf("reading boot catalog: %w", err)
		}
		if entry[0] != 0x88 {
			return fmt.Errorf("boot catalog's default entry is not bootable (indicator %#x)", entry[0])
		}
		var sectors uint16
		if n := (size + 511) / 512; n <= 0xffff {
			sectors = uint16(n)
		}
		binary.LittleEndian.PutUint16(entry[catalogSectorCount:], sectors)
		binary.LittleEndian.PutUint32(entry[catalogLoadRBA:], uint32(lba))
		if _, err := f.WriteAt(entry, at); err != nil {
			return fmt.Errorf("writing boot catalog: %w", err)
		}
		return nil
	}
	return errors.New("no volume descriptor set terminator")
}

// stampTree sets the date of every record in the directory tree below the
// root record.
func stampTree(f *os.File, rootRecord, date []byte) error {
	type extent struct{ lba, size int64 }
	queue := []extent{{int64(binary.LittleEndian.Uint32(rootRecord[2:])), int64(binary.LittleEndian.Uint32(rootRecord[10:]))}}
	seen := map[int64]bool{}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		if seen[d.lba] {
			continue
		}
		seen[d.lba] = true
		if d.size > maxDirSize {
			return fmt.Errorf("directory at block %d: %d bytes", d.lba, d.size)
		}
		buf := make([]byte, d.size)
		if _, err := f.ReadAt(buf, d.lba*blockSize); err != nil {
			return fmt.Errorf("reading directory at block %d: %w", d.lba, err)
		}
		for i := 0; i < len(buf); {
			n := int(buf[i])
			if n == 0 {
				// Records do not cross blocks; the rest of this one is padding.
				i = (i/blockSize + 1) * blockSize
				continue
			}
			if n < 34 || i+n > len(buf) {
				return fmt.Errorf("bad directory record at block %d offset %d", d.lba, i)
			}
			rec := buf[i : i+n]
			copy(rec[recordDate:], date)
			name := rec[33 : 33+int(rec[recordNameLen])]
			self := len(name) == 1 && (name[0] == 0 || name[0] == 1)
			if rec[recordFlags]&flagDirectory != 0 && !self {
				queue = append(queue, extent{int64(binary.LittleEndian.Uint32(rec[2:])), int64(binary.LittleEndian.Uint32(rec[10:]))})
			}
			i += n
		}
		if _, err := f.WriteAt(buf, d.lba*blockSize); err != nil {
			return fmt.Errorf("writing directory at block %d: %w", d.lba, err)
		}
	}
	return nil
}

// shortDate is a directory record date: years since 1900, month, day,
// hour, minute, second, offset from UTC in 15-minute steps.
func shortDate(t time.Time) []byte {
	t = t.UTC()
	return []byte{byte(t.Year() - 1900), byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second()), 0}
}

// longDate is a volume descriptor date: "YYYYMMDDHHMMSScc" and the offset.
func longDate(t time.Time) []byte {
	return append([]byte(t.UTC().Format("20060102150405")+"00"), 0)
}

// unsetLongDate is the "not specified" volume descriptor date.
func unsetLongDate() []byte {
	return append(bytes.Repeat([]byte("0"), 16), 0)
}
