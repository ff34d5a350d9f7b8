package disk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// What a disk holds besides a GPT: the signatures of volume managers,
// encryption, caches, RAID and file systems that use a whole disk, at their
// on-disk offsets. The layouts are those util-linux's libblkid probes
// (libblkid/src/superblocks/*.c) read, and the formats' own specifications
// where they have one (cited per signature). A disk whose first MiB is not
// all zeros but matches none of them is foreign too: an installer must not
// take "unknown" for "blank".

// probeWindow is how much of the start and the end of a disk is read once
// for the signature checks; anything else is read on demand.
const probeWindow = 1 << 20

// diskProbe serves a disk's bytes to the signature checks: the first and
// last probeWindow bytes, read once, and small reads elsewhere.
type diskProbe struct {
	r       io.ReaderAt
	size    int64
	head    []byte // bytes [0, len(head))
	tail    []byte // bytes [tailOff, size)
	tailOff int64
	err     error // the first failed read
}

func newDiskProbe(r io.ReaderAt, size int64) (*diskProbe, error) {
	d := &diskProbe{r: r, size: max(size, 0)}
	var err error
	if d.head, err = d.read(0, int(min(d.size, probeWindow))); err != nil {
		return nil, fmt.Errorf("read the start of the disk: %w", err)
	}
	d.tailOff = max(d.size-probeWindow, 0)
	if d.tail, err = d.read(d.tailOff, int(d.size-d.tailOff)); err != nil {
		return nil, fmt.Errorf("read the end of the disk: %w", err)
	}
	return d, nil
}

func (d *diskProbe) read(off int64, n int) ([]byte, error) {
	b := make([]byte, n)
	m, err := d.r.ReadAt(b, off)
	if m == n {
		return b, nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = fmt.Errorf("short read at byte %d: %d of %d bytes", off, m, n)
	}
	return nil, err
}

// at returns the n bytes at off, or nil when they are not on the disk or
// cannot be read (the error is kept in d.err).
func (d *diskProbe) at(off int64, n int) []byte {
	if off < 0 || n < 0 || off > d.size-int64(n) {
		return nil
	}
	if off+int64(n) <= int64(len(d.head)) {
		return d.head[off : off+int64(n)]
	}
	if off >= d.tailOff {
		return d.tail[off-d.tailOff : off-d.tailOff+int64(n)]
	}
	b, err := d.read(off, n)
	if err != nil && d.err == nil {
		d.err = err
	}
	return b
}

// has says whether magic is at off.
func (d *diskProbe) has(off int64, magic string) bool {
	b := d.at(off, len(magic))
	return b != nil && string(b) == magic
}

func (d *diskProbe) le32(off int64) (uint32, bool) {
	b := d.at(off, 4)
	if b == nil {
		return 0, false
	}
	return binary.LittleEndian.Uint32(b), true
}

// diskSignature is one kind of content: what it is, and where it is on d
// (ok false: not there).
type diskSignature struct {
	what  string
	probe func(d *diskProbe) (off int64, ok bool)
}

// protectiveMBR is the one signature a GPT disk holds itself.
const protectiveMBR = "a GPT's protective MBR"

// foundSignature is a signature found on a disk, at byte off; gptOwn for
// the protective MBR.
type foundSignature struct {
	what   string
	off    int64
	gptOwn bool
}

func (f foundSignature) String() string { return fmt.Sprintf("%s (at byte %d)", f.what, f.off) }

// magicAt is a probe for a fixed magic at a fixed offset.
func magicAt(off int64, magic string) func(*diskProbe) (int64, bool) {
	return func(d *diskProbe) (int64, bool) { return off, d.has(off, magic) }
}

// luks2SecondaryOffsets are where a LUKS2 secondary header may be: right
// after the primary, whose size is one of these (LUKS2 on-disk format
// specification, "LUKS2 binary header"; libblkid luks.c).
var luks2SecondaryOffsets = []int64{16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20}

// luksVersion probes a LUKS header: the magic, then the version as a big
// endian uint16 (LUKS1 on-disk format specification; LUKS2 keeps the
// layout of those 8 bytes).
func luksVersion(d *diskProbe, off int64, magic string, want ...uint16) bool {
	b := d.at(off, 8)
	if b == nil || string(b[:6]) != magic {
		return false
	}
	v := binary.BigEndian.Uint16(b[6:])
	for _, w := range want {
		if v == w {
			return true
		}
	}
	return false
}

// bcacheMagic is bcache's superblock magic (linux include/uapi/linux/bcache.h,
// BCACHE_MAGIC), 24 bytes into the superblock at 4 KiB.
const bcacheMagic = "\xc6\x85\x73\xf6\x4e\x1a\x45\xca\x82\x65\xf5\x7f\x48\xba\x6d\x81"

// md RAID superblocks (linux include/uapi/linux/raid/md_p.h; libblkid
// linux_raid.c): the magic, then the major version. Version 0.90 is in the
// writer's byte order, 1.x always little endian.
const mdMagic = 0xa92b4efc

func mdSuper(d *diskProbe, off int64, major uint32) bool {
	b := d.at(off, 8)
	if b == nil {
		return false
	}
	for _, bo := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		if bo.Uint32(b) == mdMagic && bo.Uint32(b[4:]) == major {
			return true
		}
		if major != 0 {
			break // 1.x is little endian only
		}
	}
	return false
}

// md 1.x records its own position in sectors at byte 128 of the
// superblock; requiring it to match keeps a copy inside a partition or a
// file from counting as the whole disk's.
func md1Super(d *diskProbe, off int64) bool {
	b := d.at(off+128, 8)
	return mdSuper(d, off, 1) && b != nil && binary.LittleEndian.Uint64(b) == uint64(off/512)
}

// ZFS vdev labels (OpenZFS include/sys/vdev_impl.h; libblkid zfs.c): four
// 256 KiB labels, two at the start and two at the end of the device (its
// size rounded down to 256 KiB); each holds a ring of uberblocks in its
// second half, in slots of at least 1 KiB starting with the magic
// 0x00bab10c as a uint64 in the writer's byte order.
const (
	zfsLabelSize = 256 << 10
	zfsUberRing  = 128 << 10
)

func zfsLabels(d *diskProbe) (int64, bool) {
	end := d.size &^ (zfsLabelSize - 1)
	le, be := make([]byte, 8), make([]byte, 8)
	binary.LittleEndian.PutUint64(le, 0x00bab10c)
	binary.BigEndian.PutUint64(be, 0x00bab10c)
	for _, label := range []int64{0, zfsLabelSize, end - 2*zfsLabelSize, end - zfsLabelSize} {
		if label < 0 || label+zfsLabelSize > d.size {
			continue
		}
		for slot := label + zfsUberRing; slot < label+zfsLabelSize; slot += 1 << 10 {
			if b := d.at(slot, 8); b != nil && (bytes.Equal(b, le) || bytes.Equal(b, be)) {
				return slot, true
			}
		}
	}
	return 0, false
}

// wholeDiskSignatures are checked on every disk, in this order; every
// match is reported. With a GPT only those in the first MiB count
// (Classify): the rest lie in its partitions.
var wholeDiskSignatures = []diskSignature{
	{"a LUKS1 encrypted volume", func(d *diskProbe) (int64, bool) { return 0, luksVersion(d, 0, "LUKS\xba\xbe", 1) }},
	{"a LUKS2 encrypted volume", func(d *diskProbe) (int64, bool) { return 0, luksVersion(d, 0, "LUKS\xba\xbe", 2) }},
	{"a LUKS2 encrypted volume (secondary header)", func(d *diskProbe) (int64, bool) {
		for _, off := range luks2SecondaryOffsets {
			if luksVersion(d, off, "SKUL\xba\xbe", 2) {
				return off, true
			}
		}
		return 0, false
	}},
	// Ceph BlueStore's label starts with this text (ceph
	// src/os/bluestore/bluestore_types.cc; libblkid bluestore.c).
	{"a Ceph BlueStore OSD", magicAt(0, "bluestore block device")},
	{"a bcache device", magicAt(4096+24, bcacheMagic)},
	// LVM2: a label header in one of the first four sectors, "LABELONE"
	// and at +24 the type "LVM2 001" (lvm2 lib/label/label.h; libblkid
	// lvm.c).
	{"an LVM2 physical volume", func(d *diskProbe) (int64, bool) {
		for s := int64(0); s < 4; s++ {
			if d.has(s*512, "LABELONE") && d.has(s*512+24, "LVM2 001") {
				return s * 512, true
			}
		}
		return 0, false
	}},
	{"a ZFS pool member (uberblock)", zfsLabels},
	// md 0.90: 64 KiB from the end, the size rounded down to 64 KiB.
	{"a Linux software RAID member (md 0.90)", func(d *diskProbe) (int64, bool) {
		off := d.size&^(64<<10-1) - 64<<10
		return off, off >= 0 && mdSuper(d, off, 0)
	}},
	// md 1.0: 8 KiB from the end, rounded down to 4 KiB.
	{"a Linux software RAID member (md 1.0)", func(d *diskProbe) (int64, bool) {
		off := (d.size - 8<<10) &^ (4<<10 - 1)
		return off, off >= 0 && md1Super(d, off)
	}},
	{"a Linux software RAID member (md 1.1)", func(d *diskProbe) (int64, bool) { return 0, md1Super(d, 0) }},
	{"a Linux software RAID member (md 1.2)", func(d *diskProbe) (int64, bool) { return 4096, md1Super(d, 4096) }},
	// File systems and boot sectors (libblkid ext.c, xfs.c, btrfs.c,
	// swap.c, iso9660.c, squashfs.c, erofs.c).
	{"an ext2/3/4 file system", magicAt(1024+56, "\x53\xef")},
	{"an XFS file system", magicAt(0, "XFSB")},
	{"a btrfs file system", magicAt(65536+64, "_BHRfS_M")},
	{"a swap area", magicAt(4096-10, "SWAPSPACE2")},
	{"an ISO 9660 file system", magicAt(32769, "CD001")},
	{"a squashfs file system", magicAt(0, "hsqs")},
	{"an EROFS file system", magicAt(1024, "\xe2\xe1\xf5\xe0")},
	// A protective MBR (UEFI spec 5.2.3) is the GPT's own: a partition of
	// type 0xEE. Any other MBR is a partition table or boot sector.
	{protectiveMBR, func(d *diskProbe) (int64, bool) { return 510, mbr(d, true) }},
	{"an MBR partition table or boot sector (FAT, NTFS, ...)", func(d *diskProbe) (int64, bool) { return 510, mbr(d, false) }},
}

// mbr says whether d starts with an MBR (the 0x55 0xaa at byte 510) that
// is, or is not, protective: one of its four entries has type 0xEE.
func mbr(d *diskProbe, protective bool) bool {
	if !d.has(510, "\x55\xaa") {
		return false
	}
	b := d.at(446, 64)
	if b == nil {
		return false
	}
	ee := false
	for i := 0; i < 4; i++ {
		ee = ee || b[16*i+4] == 0xee
	}
	return ee == protective
}

// signaturesOn lists the known signatures on d, in the order of
// wholeDiskSignatures.
func signaturesOn(d *diskProbe) []foundSignature {
	var found []foundSignature
	for _, s := range wholeDiskSignatures {
		if off, ok := s.probe(d); ok {
			found = append(found, foundSignature{what: s.what, off: off, gptOwn: s.what == protectiveMBR})
		}
	}
	return found
}

// overwrittenStart keeps the signatures of found that lie in the first
// MiB and are not a GPT's own: on a disk with a GPT they say that
// something was written over its start after the table.
func overwrittenStart(found []foundSignature) []foundSignature {
	var over []foundSignature
	for _, f := range found {
		if f.off < probeWindow && !f.gptOwn {
			over = append(over, f)
		}
	}
	return over
}

// holds says "it holds A (at byte N), B (at byte M)".
func holds(found []foundSignature) string {
	l := make([]string, len(found))
	for i, f := range found {
		l[i] = f.String()
	}
	return "it holds " + strings.Join(l, ", ")
}

// firstNonZero is the offset of the first non-zero byte of b, or -1.
func firstNonZero(b []byte) int {
	for i, c := range b {
		if c != 0 {
			return i
		}
	}
	return -1
}

// foreignContent names what a disk without a GPT holds: the known
// signatures found, else the first non-zero byte of its first MiB; ""
// for a blank disk.
func foreignContent(d *diskProbe, found []foundSignature) string {
	if len(found) > 0 {
		return holds(found)
	}
	if i := firstNonZero(d.head); i >= 0 {
		return fmt.Sprintf("its first MiB is not blank (non-zero byte at %d) and holds no signature the installer knows", i)
	}
	return ""
}
