package disk

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeSysBlock builds a /sys/block with a virtio disk, two NVMe disks of the
// same size, a SATA disk and devices that are never targets.
func fakeSysBlock(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gib := func(n int) string { return strconv.Itoa(n<<21) + "\n" } // 512-byte units
	write("vda/size", gib(3))
	write("vda/serial", "osb-target\n")
	write("nvme0n1/size", gib(960))
	write("nvme0n1/device/serial", "S4EWNX0R123456      \n")
	write("nvme0n1/device/model", "Samsung SSD 980 PRO 1TB                 \n")
	write("nvme0n1/wwid", "eui.0025385b11b2c3d4\n")
	write("nvme1n1/size", gib(960))
	write("nvme1n1/device/serial", "S4EWNX0R654321\n")
	write("nvme1n1/device/model", "Samsung SSD 980 PRO 1TB\n")
	write("sda/size", gib(480))
	write("sda/device/vendor", "ATA     \n")
	write("sda/device/model", "INTEL SSDSC2KB48\n")
	write("sda/device/vpd_pg80", "\x00\x80\x00\x14PHYS1234567890AB480G")
	write("sda/device/wwid", "naa.55cd2e414d5f3a2b\n")
	write("loop0/size", gib(1))
	write("sr0/size", gib(1))
	write("ram0/size", gib(1))
	write("sdb/size", "0\n") // empty card reader
	return dir
}

func TestScanDisksAndTargets(t *testing.T) {
	dir := fakeSysBlock(t)
	disks, err := scanDisks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range disks {
		names = append(names, d.name)
	}
	if strings.Join(names, " ") != "nvme0n1 nvme1n1 sda vda" {
		t.Fatalf("disks %v", names)
	}
	for _, tc := range []struct {
		target Target
		want   string // matching disk names
	}{
		{Target{Kind: TargetByID, Value: "virtio-osb-target"}, "vda"},
		{Target{Kind: TargetByID, Value: "/dev/disk/by-id/virtio-osb-target"}, "vda"},
		{Target{Kind: TargetByID, Value: "nvme-Samsung_SSD_980_PRO_1TB_S4EWNX0R123456"}, "nvme0n1"},
		{Target{Kind: TargetByID, Value: "nvme-eui.0025385b11b2c3d4"}, "nvme0n1"},
		{Target{Kind: TargetByID, Value: "ata-INTEL_SSDSC2KB48_PHYS1234567890AB480G"}, "sda"},
		{Target{Kind: TargetByID, Value: "wwn-0x55cd2e414d5f3a2b"}, "sda"},
		{Target{Kind: TargetSerial, Value: "S4EWNX0R654321"}, "nvme1n1"},
		{Target{Kind: TargetSerial, Value: "PHYS1234567890AB480G"}, "sda"},
		{Target{Kind: TargetPath, Value: "/dev/sda"}, "sda"},
		{Target{Kind: TargetSize, MinGiB: 900, MaxGiB: 1000}, "nvme0n1 nvme1n1"},
		{Target{Kind: TargetSize, MinGiB: 1, MaxGiB: 4}, "vda"},
		{Target{Kind: TargetSize, MinGiB: 5, MaxGiB: 10}, ""},
		{Target{Kind: TargetPath, Value: "/dev/loop0"}, ""},
	} {
		var got []string
		for _, d := range disks {
			if d.matchesTarget(tc.target) {
				got = append(got, d.name)
			}
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("%s matches %v, want %q", tc.target, got, tc.want)
		}
	}
}

func TestSelectTargetDiskRefusesAmbiguity(t *testing.T) {
	old, oldSettle := sysBlock, targetSettle
	sysBlock, targetSettle = fakeSysBlock(t), 10*time.Millisecond
	defer func() { sysBlock, targetSettle = old, oldSettle }()
	logf := func(string, ...any) {}
	_, err := SelectTarget(Target{Kind: TargetSize, MinGiB: 900, MaxGiB: 1000}, time.Second, logf)
	if err == nil || !strings.Contains(err.Error(), "ambiguous") || !strings.Contains(err.Error(), "nvme1n1") {
		t.Errorf("ambiguous: %v", err)
	}
	_, err = SelectTarget(Target{Kind: TargetSerial, Value: "nope"}, 100*time.Millisecond, logf)
	if err == nil || !strings.Contains(err.Error(), "matches no disk") || !strings.Contains(err.Error(), "/dev/vda") {
		t.Errorf("no match: %v", err)
	}
	d, err := SelectTarget(Target{Kind: TargetSerial, Value: "osb-target"}, time.Second, logf)
	if err != nil || d.name != "vda" || d.size != 3<<30 {
		t.Errorf("vda: %+v %v", d, err)
	}
}

func TestPartitionDevice(t *testing.T) {
	for disk, want := range map[string]string{"vda": "/dev/vda3", "sda": "/dev/sda3", "nvme0n1": "/dev/nvme0n1p3", "mmcblk0": "/dev/mmcblk0p3"} {
		if got := PartitionDevice(disk, 3); got != want {
			t.Errorf("%s: %s, want %s", disk, got, want)
		}
	}
}
