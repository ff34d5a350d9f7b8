package pid1

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

// diskInfo is what the init knows about a whole disk from sysfs.
type diskInfo struct {
	name   string   // kernel name, e.g. vda, nvme0n1
	size   int64    // bytes
	serial string   // "" if sysfs has none
	ids    []string // names as udev would put them in /dev/disk/by-id
}

func (d diskInfo) devPath() string { return "/dev/" + d.name }

func (d diskInfo) String() string {
	s := fmt.Sprintf("%s (%.1f GiB", d.devPath(), float64(d.size)/(1<<30))
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
func scanDisks(dir string) ([]diskInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list disks: %w", err)
	}
	var out []diskInfo
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
		d := diskInfo{name: name, size: sectors * 512} // sysfs counts 512-byte units
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

// matchesTarget says whether d is selected by t.
func (d diskInfo) matchesTarget(t InstallTarget) bool {
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
		return d.devPath() == t.Value || d.name == strings.TrimPrefix(t.Value, "/dev/")
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

// selectTargetDisk waits for the disk t selects and returns it. No match
// within the wait, or more than one match, is an error listing the disks.
func selectTargetDisk(t InstallTarget, wait time.Duration, logf func(string, ...any)) (diskInfo, error) {
	deadline := time.Now().Add(wait)
	logged := false
	for {
		disks, err := scanDisks(sysBlock)
		if err != nil {
			return diskInfo{}, err
		}
		var matches []diskInfo
		for _, d := range disks {
			if d.matchesTarget(t) {
				matches = append(matches, d)
			}
		}
		if len(matches) > 0 {
			time.Sleep(targetSettle)
			again, err := scanDisks(sysBlock)
			if err != nil {
				return diskInfo{}, err
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
			return diskInfo{}, fmt.Errorf("install target %s is ambiguous: it matches %s; refusing to guess (use a selector that matches one disk)", t, strings.Join(l, ", "))
		}
		if time.Now().After(deadline) {
			var l []string
			for _, d := range disks {
				l = append(l, d.String())
			}
			return diskInfo{}, fmt.Errorf("install target %s matches no disk within %v; disks seen: [%s]", t, wait, strings.Join(l, "; "))
		}
		if !logged {
			logf("install: waiting up to %v for a disk matching %s", wait, t)
			logged = true
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (t InstallTarget) String() string {
	if t.Kind == TargetSize {
		return fmt.Sprintf("size:%d-%d", t.MinGiB, t.MaxGiB)
	}
	return string(t.Kind) + ":" + t.Value
}

// blockSectorSize is the logical sector size of an open block device.
func blockSectorSize(f *os.File) (int, error) {
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET)
	if err != nil {
		return 0, fmt.Errorf("BLKSSZGET %s: %w", f.Name(), err)
	}
	return n, nil
}

// blockSize is the size in bytes of an open block device.
func blockSize(f *os.File) (int64, error) {
	var size uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&size))); e != 0 {
		return 0, fmt.Errorf("BLKGETSIZE64 %s: %w", f.Name(), e)
	}
	return int64(size), nil
}

// openDisk opens a block device with flag and reads its logical sector size
// and its size: what every reader or writer of a partition table needs.
func openDisk(path string, flag int) (f *os.File, sectorSize int, size int64, err error) {
	f, err = os.OpenFile(path, flag|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open %s: %w", path, err)
	}
	if sectorSize, err = blockSectorSize(f); err == nil {
		size, err = blockSize(f)
	}
	if err != nil {
		f.Close()
		return nil, 0, 0, err
	}
	return f, sectorSize, size, nil
}

// rereadPartitions asks the kernel to read the disk's new table.
func rereadPartitions(f *os.File) error {
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

// addKernelPartition tells the kernel about one new partition without
// rereading the whole table, which it refuses while another partition of
// the disk is in use (the mounted root).
func addKernelPartition(f *os.File, pno int, start, length int64) error {
	p := unix.BlkpgPartition{Start: start, Length: length, Pno: int32(pno)}
	arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_ADD_PARTITION, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg))); e != 0 {
		return fmt.Errorf("BLKPG add partition %d to %s: %w", pno, f.Name(), e)
	}
	return nil
}
