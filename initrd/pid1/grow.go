package pid1

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/initrd/gpt"
)

// First boot of disk.raw on a disk bigger than the image (dd onto a server
// disk, a VM disk resized): the GPT's backup copy sits where the image
// ended, and osb-data, the last partition, ends there too. The init moves
// the backup to the disk's end, grows osb-data to the end of the disk and,
// once it is mounted, grows its ext4 file system online.

// ext4IocResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64): grow a
// mounted ext4 file system to a new block count (no resize2fs needed).
const ext4IocResizeFS = 0x40086610

// growDataEntry extends t's osb-data entry to the last usable MiB of a disk
// of size bytes when it is the last partition and there is at least a MiB
// to gain. It returns the grown entry with its old and new end in bytes,
// or nil when nothing grows.
func growDataEntry(t *gpt.Table, size int64) (p *gpt.Partition, oldEnd, newEnd int64) {
	ss := int64(t.SectorSize)
	data := t.ByName(partLabelData)
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

// fitGPTToDisk makes the GPT of the disk f (size bytes, ss-byte sectors)
// fit the disk: osb-data grown to the end when it is last (growDataEntry)
// and the backup header at the disk's last sector. It writes only when
// something changes, backup first, primary last. It returns the grown
// entry (nil if none) and whether the backup was moved.
func fitGPTToDisk(f *os.File, ss int, size int64) (grown *gpt.Partition, oldEnd, newEnd int64, moved bool, err error) {
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
	if err := writeTable(f, t, size, true); err != nil {
		return nil, 0, 0, false, err
	}
	return grown, oldEnd, newEnd, moved, nil
}

// resizeKernelPartition tells the running kernel partition pno of disk f
// now has length bytes (BLKPG; the partition must not be in use).
func resizeKernelPartition(f *os.File, pno int, start, length int64) error {
	p := unix.BlkpgPartition{Start: start, Length: length, Pno: int32(pno)}
	arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_RESIZE_PARTITION, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); e != 0 {
		return fmt.Errorf("BLKPG resize partition %d of %s: %w", pno, f.Name(), e)
	}
	return nil
}

// diskOf returns the whole-disk device holding partition device part.
func diskOf(part string) (string, error) {
	link, err := filepath.EvalSymlinks(filepath.Join("/sys/class/block", filepath.Base(part)))
	if err != nil {
		return "", fmt.Errorf("find the disk of %s: %w", part, err)
	}
	if _, err := os.Stat(filepath.Join(link, "partition")); err != nil {
		return "", fmt.Errorf("%s is not a partition", part)
	}
	return "/dev/" + filepath.Base(filepath.Dir(link)), nil
}

// fitDisk runs fitGPTToDisk on the disk holding rootDev and tells the
// kernel about a grown osb-data.
func (i *initProcess) fitDisk(rootDev string) error {
	disk, err := diskOf(rootDev)
	if err != nil {
		return err
	}
	f, ss, size, err := openDisk(disk, os.O_RDWR)
	if err != nil {
		return err
	}
	defer f.Close()
	grown, oldEnd, newEnd, moved, err := fitGPTToDisk(f, ss, size)
	if err != nil {
		return err
	}
	if moved {
		i.logf("persist: moved the backup GPT of %s to the end of the disk (%d MiB)", disk, size/mib)
	}
	if grown == nil {
		return nil
	}
	start, _ := grown.ByteRange(ss)
	i.logf("persist: grew %s (partition %d of %s) to the end of the disk: %d -> %d MiB", partLabelData, grown.Index, disk, (oldEnd-start)/mib, (newEnd-start)/mib)
	return resizeKernelPartition(f, grown.Index, start, newEnd-start)
}

// ext4Geometry reads the block size and block count from an ext4
// superblock (the 1024 bytes at byte 1024 of the file system).
func ext4Geometry(sb []byte) (blockSize int64, blocks uint64, err error) {
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

// growFilesystem grows the ext4 file system of dev, mounted on mnt, to the
// size of dev when the device is bigger (after fitDisk, or after a
// boot that grew the partition but stopped before this).
func (i *initProcess) growFilesystem(dev, mnt string) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	size, err := blockSize(f)
	if err != nil {
		return err
	}
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return fmt.Errorf("read the superblock of %s: %w", dev, err)
	}
	bs, blocks, err := ext4Geometry(sb)
	if err != nil {
		return fmt.Errorf("%s: %w", dev, err)
	}
	want := uint64(size / bs)
	if want <= blocks {
		return nil
	}
	d, err := os.Open(mnt)
	if err != nil {
		return err
	}
	defer d.Close()
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, d.Fd(), ext4IocResizeFS, uintptr(unsafe.Pointer(&want))); e != 0 {
		return fmt.Errorf("EXT4_IOC_RESIZE_FS %s to %d blocks: %w", dev, want, e)
	}
	i.logf("persist: grew the file system on %s: %d -> %d MiB", dev, int64(blocks)*bs/mib, int64(want)*bs/mib)
	return nil
}
