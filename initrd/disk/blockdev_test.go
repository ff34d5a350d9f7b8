package disk

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFSLabel(t *testing.T) {
	ext4 := make([]byte, 4096)
	ext4[1024+56], ext4[1024+57] = 0x53, 0xef
	copy(ext4[1024+120:], "osb-data\x00junk")

	iso := make([]byte, 34*1024)
	iso[32768] = 1
	copy(iso[32769:], "CD001")
	copy(iso[32768+40:], "OSB_LIVE                        ")

	fat32 := make([]byte, 512)
	fat32[510], fat32[511] = 0x55, 0xaa
	fat32[66] = 0x29
	copy(fat32[71:], "ESP        FAT32   ")
	fat16 := make([]byte, 512)
	fat16[510], fat16[511] = 0x55, 0xaa
	fat16[38] = 0x29
	copy(fat16[43:], "NO NAME    FAT16   ")

	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"ext4":           {ext4, "osb-data"},
		"iso9660":        {iso, "OSB_LIVE"},
		"fat32":          {fat32, "ESP"},
		"fat16 no label": {fat16, ""},
		"zeros":          {make([]byte, 64<<10), ""},
		"short":          {[]byte("hsqs"), ""},
	} {
		if got := fsLabel(tc.b); got != tc.want {
			t.Errorf("%s: label %q, want %q", name, got, tc.want)
		}
	}
}

// FuzzFSLabel reads labels from fuzzed superblocks: the init reads every
// block device on the machine this way. No panic, and a label is never
// longer than the longest field (ISO 9660's 32 bytes).
func FuzzFSLabel(f *testing.F) {
	ext4 := make([]byte, 2048)
	ext4[1024+56], ext4[1024+57] = 0x53, 0xef
	copy(ext4[1024+120:], "osb-data")
	f.Add(ext4)
	fat := make([]byte, 512)
	fat[510], fat[511], fat[66] = 0x55, 0xaa, 0x29
	copy(fat[71:], "ESP        FAT32   ")
	f.Add(fat)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		if l := fsLabel(b); len(l) > 32 {
			t.Fatalf("label of %d bytes", len(l))
		}
	})
}

func TestScanBlockDevices(t *testing.T) {
	sys := t.TempDir()
	for name, uevent := range map[string]string{
		"vda":  "MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n",
		"vda1": "MAJOR=254\nMINOR=1\nDEVNAME=vda1\nDEVTYPE=partition\nPARTN=1\nPARTNAME=osb-esp\n",
		"vda2": "MAJOR=254\nMINOR=2\nDEVNAME=vda2\nDEVTYPE=partition\nPARTN=2\nPARTNAME=osb-root\n",
		"vdb1": "DEVNAME=vdb1\nPARTNAME=osb-root\n",
	} {
		os.MkdirAll(filepath.Join(sys, name), 0o755)
		os.WriteFile(filepath.Join(sys, name, "uevent"), []byte(uevent), 0o644)
	}
	devs, err := scanBlockDevices(sys)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 4 || devs[0].name != "vda" || devs[2].partName != "osb-root" {
		t.Fatalf("devices: %v", devs)
	}
	var matches []string
	for _, d := range devs {
		if d.matches(DeviceRef{ByPartLabel, "osb-esp"}) {
			matches = append(matches, d.devPath())
		}
		if d.matches(DeviceRef{ByLabel, "osb-esp"}) {
			t.Errorf("%s matched a label by its partition name", d.name)
		}
	}
	if len(matches) != 1 || matches[0] != "/dev/vda1" {
		t.Errorf("partlabel osb-esp matched %v", matches)
	}
}

func TestWaitForBlockDeviceTimesOut(t *testing.T) {
	if _, err := os.Stat("/sys/class/block"); err != nil {
		t.Skip("no /sys/class/block")
	}
	start := time.Now()
	_, err := WaitForBlockDevice(DeviceRef{ByPartLabel, "osb-test-never-exists"}, 300*time.Millisecond)
	if err == nil {
		t.Fatal("found a device that does not exist")
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("took %v", time.Since(start))
	}
	t.Log(err)
}
