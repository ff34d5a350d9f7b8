package pid1

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/initrd/disk"
)

// First boot of disk.raw on a disk bigger than the image (dd onto a server
// disk, a VM disk resized): the GPT's backup copy sits where the image
// ended, and osb-data, the last partition, ends there too. The init moves
// the backup to the disk's end, grows osb-data to the end of the disk
// (package initrd/disk: FitGPTToDisk) and, once it is mounted, grows its
// ext4 file system online.

// ext4IocResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64): grow a
// mounted ext4 file system to a new block count (no resize2fs needed).
const ext4IocResizeFS = 0x40086610

// fitDisk runs disk.FitGPTToDisk on the disk holding rootDev and tells
// the kernel about a grown osb-data.
func (i *initProcess) fitDisk(rootDev string) error {
	diskDev, err := disk.OfPartition(rootDev)
	if err != nil {
		return err
	}
	f, ss, size, err := disk.Open(diskDev, os.O_RDWR)
	if err != nil {
		return err
	}
	defer f.Close()
	grown, oldEnd, newEnd, moved, err := disk.FitGPTToDisk(f, ss, size)
	if err != nil {
		return err
	}
	if moved {
		i.logf("persist: moved the backup GPT of %s to the end of the disk (%d MiB)", diskDev, size/mib)
	}
	if grown == nil {
		return nil
	}
	start, _ := grown.ByteRange(ss)
	i.logf("persist: grew %s (partition %d of %s) to the end of the disk: %d -> %d MiB", disk.PartLabelData, grown.Index, diskDev, (oldEnd-start)/mib, (newEnd-start)/mib)
	return disk.ResizeKernelPartition(f, grown.Index, start, newEnd-start)
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
	size, err := disk.Size(f)
	if err != nil {
		return err
	}
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return fmt.Errorf("read the superblock of %s: %w", dev, err)
	}
	bs, blocks, err := disk.Ext4Geometry(sb)
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
