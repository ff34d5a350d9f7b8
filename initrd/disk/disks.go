// Package disk is the init's knowledge of disks: finding the block devices
// and disks the kernel command line names (sysfs, disks.go, blockdev.go),
// saying what a disk holds before an install (classify.go, signatures.go),
// planning and writing an install onto it (install.go), and fitting an
// installed disk's GPT to the disk it was copied onto (grow.go). Partition
// tables are read and written by package initrd/gpt. The init (package
// initrd/pid1) drives all of it; docs/cmdline.md defines what it does.
package disk

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysBlock lists whole disks (partitions are subdirectories of their disk).
var sysBlock = "/sys/block"

// Info is what the init knows about a whole disk from sysfs.
type Info struct {
	name   string   // kernel name, e.g. vda, nvme0n1
	size   int64    // bytes
	serial string   // "" if sysfs has none
	ids    []string // names as udev would put them in /dev/disk/by-id
}

// DevPath is the disk's device node.
func (d Info) DevPath() string { return "/dev/" + d.name }

func (d Info) String() string {
	s := fmt.Sprintf("%s (%.1f GiB", d.DevPath(), float64(d.size)/(1<<30))
	if d.serial != "" {
		s += fmt.Sprintf(", serial %q", d.serial)
	}
	if len(d.ids) > 0 {
		s += ", by-id " + strings.Join(d.ids, " ")
	}
	return s + ")"
}

// notDisks are kernel name prefixes of block devices that are never install
// targets: RAM, loop, optical, device-mapper and md devices.
var notDisks = []string{"loop", "ram", "zram", "sr", "dm-", "md", "nbd", "fd"}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// udevString folds white space runs into "_" the way udev's by-id names do.
func udevString(s string) string {
	return strings.Join(strings.Fields(s), "_")
}

// scanDisks lists the whole disks under dir (/sys/block), sorted by name.
func scanDisks(dir string) ([]Info, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list disks: %w", err)
	}
	var out []Info
	for _, e := range entries {
		name := e.Name()
		skip := false
		for _, p := range notDisks {
			if strings.HasPrefix(name, p) {
				skip = true
			}
		}
		sectors, err := strconv.ParseInt(readTrim(filepath.Join(dir, name, "size")), 10, 64)
		if skip || err != nil || sectors == 0 {
			continue
		}
		d := Info{name: name, size: sectors * 512} // sysfs counts 512-byte units
		dev := filepath.Join(dir, name, "device")
		d.serial = readTrim(filepath.Join(dir, name, "serial")) // virtio
		if d.serial == "" {
			d.serial = readTrim(filepath.Join(dev, "serial")) // NVMe
		}
		if d.serial == "" {
			d.serial = vpdSerial(filepath.Join(dev, "vpd_pg80")) // SCSI, SATA
		}
		model := udevString(readTrim(filepath.Join(dev, "model")))
		switch {
		case strings.HasPrefix(name, "vd") && d.serial != "":
			s := d.serial
			if len(s) > 20 { // the virtio-blk serial field is 20 bytes
				s = s[:20]
			}
			d.ids = append(d.ids, "virtio-"+udevString(s))
		case strings.HasPrefix(name, "nvme") && d.serial != "":
			d.ids = append(d.ids, "nvme-"+model+"_"+udevString(d.serial))
		case strings.HasPrefix(name, "sd") && d.serial != "" && strings.TrimSpace(readTrim(filepath.Join(dev, "vendor"))) == "ATA":
			d.ids = append(d.ids, "ata-"+model+"_"+udevString(d.serial))
		}
		wwid := readTrim(filepath.Join(dir, name, "wwid"))
		if wwid == "" {
			wwid = readTrim(filepath.Join(dev, "wwid"))
		}
		switch {
		case strings.HasPrefix(wwid, "naa."):
			d.ids = append(d.ids, "wwn-0x"+strings.ToLower(wwid[4:]))
		case strings.HasPrefix(wwid, "eui."):
			d.ids = append(d.ids, "nvme-"+wwid)
		}
		out = append(out, d)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out, nil
}

// vpdSerial reads the unit serial number VPD page (0x80): a 4-byte header,
// then the serial.
func vpdSerial(p string) string {
	b, err := os.ReadFile(p)
	if err != nil || len(b) < 4 || b[1] != 0x80 {
		return ""
	}
	n := int(b[2])<<8 | int(b[3])
	if 4+n > len(b) {
		n = len(b) - 4
	}
	return strings.TrimSpace(string(b[4 : 4+n]))
}

// TargetKind is how osb.install.target selects a disk.
type TargetKind string

const (
	TargetByID   TargetKind = "by-id"
	TargetSerial TargetKind = "serial"
	TargetPath   TargetKind = "path"
	TargetSize   TargetKind = "size"
)

// Target is a parsed osb.install.target.
type Target struct {
	Kind  TargetKind
	Value string // for by-id, serial, path
	// MinGiB and MaxGiB bound the disk size for TargetSize.
	MinGiB, MaxGiB uint64
}

func (t Target) String() string {
	if t.Kind == TargetSize {
		return fmt.Sprintf("size:%d-%d", t.MinGiB, t.MaxGiB)
	}
	return string(t.Kind) + ":" + t.Value
}

// matchesTarget says whether d is selected by t.
func (d Info) matchesTarget(t Target) bool {
	switch t.Kind {
	case TargetByID:
		id := strings.TrimPrefix(t.Value, "/dev/disk/by-id/")
		for _, x := range d.ids {
			if x == id {
				return true
			}
		}
	case TargetSerial:
		return d.serial != "" && d.serial == t.Value
	case TargetPath:
		return d.DevPath() == t.Value || d.name == strings.TrimPrefix(t.Value, "/dev/")
	case TargetSize:
		const gib = 1 << 30
		return d.size >= int64(t.MinGiB)*gib && d.size <= int64(t.MaxGiB)*gib
	}
	return false
}

// targetSettle is how long disk discovery must stay unchanged before a
// selection counts: a second matching disk that shows up a moment later
// must make the selection ambiguous, not lose a race.
var targetSettle = 2 * time.Second

// SelectTarget waits for the disk t selects and returns it. No match
// within the wait, or more than one match, is an error listing the disks.
func SelectTarget(t Target, wait time.Duration, logf func(string, ...any)) (Info, error) {
	deadline := time.Now().Add(wait)
	logged := false
	for {
		disks, err := scanDisks(sysBlock)
		if err != nil {
			return Info{}, err
		}
		var matches []Info
		for _, d := range disks {
			if d.matchesTarget(t) {
				matches = append(matches, d)
			}
		}
		if len(matches) > 0 {
			time.Sleep(targetSettle)
			again, err := scanDisks(sysBlock)
			if err != nil {
				return Info{}, err
			}
			if len(again) != len(disks) {
				continue // still discovering
			}
		}
		switch {
		case len(matches) == 1:
			return matches[0], nil
		case len(matches) > 1:
			var l []string
			for _, m := range matches {
				l = append(l, m.String())
			}
			return Info{}, fmt.Errorf("install target %s is ambiguous: it matches %s; refusing to guess (use a selector that matches one disk)", t, strings.Join(l, ", "))
		}
		if time.Now().After(deadline) {
			var l []string
			for _, d := range disks {
				l = append(l, d.String())
			}
			return Info{}, fmt.Errorf("install target %s matches no disk within %v; disks seen: [%s]", t, wait, strings.Join(l, "; "))
		}
		if !logged {
			logf("install: waiting up to %v for a disk matching %s", wait, t)
			logged = true
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// blockSectorSize is the logical sector size of an open block device.
func blockSectorSize(f *os.File) (int, error) {
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET)
	if err != nil {
		return 0, fmt.Errorf("BLKSSZGET %s: %w", f.Name(), err)
	}
	return n, nil
}

// Size is the size in bytes of an open block device.
func Size(f *os.File) (int64, error) {
	var size uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); e != 0 {
		return 0, fmt.Errorf("BLKGETSIZE64 %s: %w", f.Name(), e)
	}
	return int64(size), nil
}

// Open opens a block device with flag and reads its logical sector size
// and its size: what every reader or writer of a partition table needs.
func Open(path string, flag int) (f *os.File, sectorSize int, size int64, err error) {
	f, err = os.OpenFile(path, flag|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open %s: %w", path, err)
	}
	if sectorSize, err = blockSectorSize(f); err == nil {
		size, err = Size(f)
	}
	if err != nil {
		f.Close()
		return nil, 0, 0, err
	}
	return f, sectorSize, size, nil
}

// RereadPartitions asks the kernel to read the disk's new table.
func RereadPartitions(f *os.File) error {
	var err error
	// The kernel refuses while udev or a prober holds a partition open;
	// in the initrd nobody should, but retry briefly anyway.
	for try := 0; try < 10; try++ {
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKRRPART, 0); e == 0 {
			return nil
		} else {
			err = e
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("BLKRRPART %s: %w", f.Name(), err)
}

// AddKernelPartition tells the kernel about one new partition without
// rereading the whole table, which it refuses while another partition of
// the disk is in use (the mounted root).
func AddKernelPartition(f *os.File, pno int, start, length int64) error {
	p := unix.BlkpgPartition{Start: start, Length: length, Pno: int32(pno)}
	arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_ADD_PARTITION, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); e != 0 {
		return fmt.Errorf("BLKPG add partition %d to %s: %w", pno, f.Name(), e)
	}
	return nil
}

// ResizeKernelPartition tells the running kernel partition pno of disk f
// now has length bytes (BLKPG; the partition must not be in use).
func ResizeKernelPartition(f *os.File, pno int, start, length int64) error {
	p := unix.BlkpgPartition{Start: start, Length: length, Pno: int32(pno)}
	arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_RESIZE_PARTITION, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); e != 0 {
		return fmt.Errorf("BLKPG resize partition %d of %s: %w", pno, f.Name(), e)
	}
	return nil
}

// OfPartition returns the whole-disk device holding partition device part.
func OfPartition(part string) (string, error) {
	link, err := filepath.EvalSymlinks(filepath.Join("/sys/class/block", filepath.Base(part)))
	if err != nil {
		return "", fmt.Errorf("find the disk of %s: %w", part, err)
	}
	if _, err := os.Stat(filepath.Join(link, "partition")); err != nil {
		return "", fmt.Errorf("%s is not a partition", part)
	}
	return "/dev/" + filepath.Base(filepath.Dir(link)), nil
}

// PartitionDevice names partition n of disk: vda3, but nvme0n1p3.
func PartitionDevice(disk string, n int) string {
	if last := disk[len(disk)-1]; last >= '0' && last <= '9' {
		return "/dev/" + disk + "p" + strconv.Itoa(n)
	}
	return "/dev/" + disk + strconv.Itoa(n)
}
