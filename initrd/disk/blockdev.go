package disk

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ironcore-dev/os-builder/internal/keyvalue"
)

// RefKind says how a DeviceRef names a block device.
type RefKind string

const (
	ByLabel     RefKind = "label"     // the file system label
	ByPartLabel RefKind = "partlabel" // the GPT partition name
)

// DeviceRef names a block device by file system label or GPT partition
// name (osb.data, osb.root=label:... or partlabel:...).
type DeviceRef struct {
	Kind  RefKind // ByLabel or ByPartLabel
	Value string
}

func (d DeviceRef) String() string { return string(d.Kind) + ":" + d.Value }

// WaitForBlockDevice polls /sys/class/block until a device matches ref or
// wait has passed, and returns its /dev path.
func WaitForBlockDevice(ref DeviceRef, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		devs, err := scanBlockDevices("/sys/class/block")
		if err != nil {
			return "", err
		}
		var matches []string
		for _, d := range devs {
			if d.matches(ref) {
				matches = append(matches, d.devPath())
			}
		}
		switch {
		case len(matches) == 1:
			return matches[0], nil
		case len(matches) > 1:
			return "", fmt.Errorf("%s matches several devices (%s); refusing to guess", ref, strings.Join(matches, ", "))
		}
		if time.Now().After(deadline) {
			var seen []string
			for _, d := range devs {
				seen = append(seen, d.String())
			}
			return "", fmt.Errorf("no block device with %s appeared within %v; devices seen: [%s]", ref, wait, strings.Join(seen, " "))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// blockDevice is what the init knows about one entry of /sys/class/block.
type blockDevice struct {
	name     string // kernel name, e.g. vda2
	partName string // GPT partition name (PARTNAME in uevent), "" if none
	label    string // file system label read from the device, "" if none
}

func (d blockDevice) devPath() string { return "/dev/" + d.name }

func (d blockDevice) String() string {
	s := d.name
	if d.partName != "" {
		s += fmt.Sprintf(" partlabel=%q", d.partName)
	}
	if d.label != "" {
		s += fmt.Sprintf(" label=%q", d.label)
	}
	return s
}

func (d blockDevice) matches(ref DeviceRef) bool {
	switch ref.Kind {
	case ByPartLabel:
		return d.partName != "" && d.partName == ref.Value
	case ByLabel:
		return d.label != "" && d.label == ref.Value
	}
	return false
}

// scanBlockDevices lists the block devices in sysDir (/sys/class/block),
// sorted by name. The GPT partition name comes from the kernel's own GPT
// parser via the uevent file; labels are read from the devices' superblocks.
func scanBlockDevices(sysDir string) ([]blockDevice, error) {
	entries, err := os.ReadDir(sysDir)
	if err != nil {
		return nil, fmt.Errorf("list block devices: %w", err)
	}
	var out []blockDevice
	for _, e := range entries {
		d := blockDevice{name: e.Name()}
		if ue, err := keyvalue.ReadFile(filepath.Join(sysDir, e.Name(), "uevent")); err == nil {
			d.partName = ue["PARTNAME"]
			if n := ue["DEVNAME"]; n != "" {
				d.name = n
			}
		}
		if sz, err := os.ReadFile(filepath.Join(sysDir, e.Name(), "size")); err == nil && strings.TrimSpace(string(sz)) != "0" {
			d.label = readFSLabel(d.devPath())
		}
		out = append(out, d)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out, nil
}

// readFSLabel returns the file system label of a device, "" when it has
// none or cannot be read.
func readFSLabel(dev string) string {
	f, err := os.Open(dev)
	if err != nil {
		return ""
	}
	defer f.Close()
	buf := make([]byte, 34*1024)
	n, _ := f.ReadAt(buf, 0)
	return fsLabel(buf[:n])
}

// fsLabel reads the label from the first 34 KiB of a file system: ext2/3/4,
// ISO 9660 and FAT. (squashfs and erofs images carry no label that tools
// set; the root partition is found by its GPT name instead.)
func fsLabel(b []byte) string {
	// ext2/3/4: superblock at 1024, magic 0xEF53 at +56, volume name at +120.
	if len(b) >= 1024+136 && b[1024+56] == 0x53 && b[1024+57] == 0xef {
		return cString(b[1024+120 : 1024+136])
	}
	// ISO 9660: primary volume descriptor at 32 KiB, volume id at +40.
	if len(b) >= 32768+72 && b[32768] == 1 && string(b[32769:32774]) == "CD001" {
		return strings.TrimRight(string(b[32768+40:32768+72]), " ")
	}
	// FAT: boot sector signature 0x55AA; the label is at 71 for FAT32 and
	// at 43 for FAT12/16, each after an extended boot signature 0x29.
	if len(b) >= 512 && b[510] == 0x55 && b[511] == 0xaa {
		if string(b[82:87]) == "FAT32" && b[66] == 0x29 {
			return fatLabel(b[71:82])
		}
		if string(b[54:57]) == "FAT" && b[38] == 0x29 {
			return fatLabel(b[43:54])
		}
	}
	return ""
}

func fatLabel(b []byte) string {
	l := strings.TrimRight(string(b), " ")
	if l == "NO NAME" {
		return ""
	}
	return l
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
