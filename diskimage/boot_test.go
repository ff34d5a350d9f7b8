package diskimage

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil/uefiboot"
)

// TestBootDiskInQEMU boots the disk image on a virtio disk: OVMF must find
// the ESP and run EFI/BOOT/BOOTX64.EFI from it. The UEFI shell ("Shell>",
// a failure marker of the harness) means it found nothing bootable.
func TestBootDiskInQEMU(t *testing.T) {
	uefiboot.Require(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "disk.raw")
	err := Write(p, Options{
		UKI:             uefiboot.SystemdBoot,
		Root:            writeInput(t, dir, "root.squashfs", 3*MiB, 5),
		Seed:            "boot test",
		SourceDateEpoch: 1700000000,
	})
	if err != nil {
		t.Fatal(err)
	}
	uefiboot.BootsFrom(t, qemu.Config{Disks: []string{p}}, regexp.MustCompile(`starting Boot[0-9A-F]{4} "UEFI Misc Device"`))
}
