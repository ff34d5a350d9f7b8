package diskimage

import (
	"context"
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
	ctx, cancel := context.WithTimeout(context.Background(), uefiboot.Timeout)
	defer cancel()
	vm := qemu.StartT(t, ctx, qemu.Config{UEFI: true, Disks: []string{p}, MemoryMB: 512, NoReboot: true})
	if _, err := vm.WaitFor(ctx, uefiboot.SystemdBootMarker); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`starting Boot[0-9A-F]{4} "UEFI Misc Device"`).MatchString(vm.Console()) {
		t.Errorf("not booted from the virtio disk:\n%s", vm.Tail(30))
	}
}
