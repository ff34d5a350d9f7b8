package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/ironcore-dev/os-builder/initrd/gpt"
)

// First boot of disk.raw on a disk bigger than the image (dd onto a server
// disk, a VM disk resized): the GPT's backup copy sits where the image
// ended, and osb-data, the last partition, ends there too. The init moves
// the backup to the disk's end (FitGPTToDisk), grows osb-data to the end of
// the disk and, once it is mounted, grows its ext4 file system online
// (Ext4Geometry says how big it is). A disk without osb-data gets one
// (DataPartitionStart says where).

const (
	mib = 1 << 20
	gib = 1 << 30
	// minDataSize is the smallest data partition the init creates.
	minDataSize = 64 * mib
)

// growDataEntry extends t's osb-data entry to the last usable MiB of a disk
// of size bytes when it is the last partition and there is at least a MiB
// to gain. It returns the grown entry with its old and new end in bytes,
// or nil when nothing grows.
func growDataEntry(t *gpt.Table, size int64) (p *gpt.Partition, oldEnd, newEnd int64) {
	ss := int64(t.SectorSize)
	data := t.ByName(PartLabelData)
	if data == nil {
		return nil, 0, 0
	}
	start, end := data.ByteRange(t.SectorSize)
	for i := range t.Partitions {
		if q := &t.Partitions[i]; q != data {
			if _, e := q.ByteRange(t.SectorSize); e > end {
				return nil, 0, 0 // not last: growing would need moving
			}
		}
	}
	_, last := t.Usable(size)
	usableEnd := int64(last+1) * ss / mib * mib
	if usableEnd-end < mib || usableEnd <= start {
		return nil, 0, 0
	}
	data.LastLBA = uint64(usableEnd/ss) - 1
	return data, end, usableEnd
}

// FitGPTToDisk makes the GPT of the disk f (size bytes, ss-byte sectors)
// fit the disk: osb-data grown to the end when it is last (growDataEntry)
// and the backup header at the disk's last sector. It writes only when
// something changes, backup first, primary last. It returns the grown
// entry (nil if none) and whether the backup was moved.
func FitGPTToDisk(f *os.File, ss int, size int64) (grown *gpt.Partition, oldEnd, newEnd int64, moved bool, err error) {
	t, err := gpt.Read(f, ss, size)
	if err != nil {
		return nil, 0, 0, false, fmt.Errorf("read the GPT of %s: %w", f.Name(), err)
	}
	lastLBA := uint64(size/int64(ss)) - 1
	_, backupErr := gpt.ReadAt(f, ss, lastLBA)
	moved = backupErr != nil
	grown, oldEnd, newEnd = growDataEntry(t, size)
	if grown == nil && !moved {
		return nil, 0, 0, false, nil
	}
	if err := WriteTable(f, t, size, true); err != nil {
		return nil, 0, 0, false, err
	}
	return grown, oldEnd, newEnd, moved, nil
}

// Ext4Geometry reads the block size and block count from an ext4
// superblock (the 1024 bytes at byte 1024 of the file system).
func Ext4Geometry(sb []byte) (blockSize int64, blocks uint64, err error) {
	const (
		magicOff      = 0x38
		logBlockOff   = 0x18
		incompatOff   = 0x60
		blocksHiOff   = 0x150
		incompat64bit = 0x80
		ext4Magic     = 0xef53
	)
	if len(sb) < blocksHiOff+4 {
		return 0, 0, fmt.Errorf("ext4 superblock: %d bytes, want at least %d", len(sb), blocksHiOff+4)
	}
	if m := binary.LittleEndian.Uint16(sb[magicOff:]); m != ext4Magic {
		return 0, 0, fmt.Errorf("ext4 superblock: magic %#04x, want %#04x", m, ext4Magic)
	}
	logBlock := binary.LittleEndian.Uint32(sb[logBlockOff:])
	if logBlock > 6 { // 1 KiB << 6 = 64 KiB, the largest ext4 block
		return 0, 0, fmt.Errorf("ext4 superblock: block size 1 KiB << %d is out of range", logBlock)
	}
	blocks = uint64(binary.LittleEndian.Uint32(sb[4:]))
	if binary.LittleEndian.Uint32(sb[incompatOff:])&incompat64bit != 0 {
		blocks |= uint64(binary.LittleEndian.Uint32(sb[blocksHiOff:])) << 32
	}
	if blocks == 0 {
		return 0, 0, errors.New("ext4 superblock: zero blocks")
	}
	return 1024 << logBlock, blocks, nil
}

// DataPartitionStart is where a new osb-data partition starts: at twice the
// end of the root partition, so later, bigger images still fit before it,
// or right after the root partition when that would leave less than 1 GiB.
// The result is 1 MiB aligned. usableEnd is the end of the disk's usable
// space, rounded down to a MiB.
func DataPartitionStart(rootEnd, usableEnd int64) (int64, error) {
	align := func(n int64) int64 { return (n + mib - 1) / mib * mib }
	start := align(2 * rootEnd)
	if usableEnd-start < gib {
		start = align(rootEnd)
	}
	if usableEnd-start < minDataSize {
		return 0, fmt.Errorf("only %d MiB free after the root partition; a data partition needs at least %d MiB", max(0, usableEnd-start)/mib, minDataSize/mib)
	}
	return start, nil
}
