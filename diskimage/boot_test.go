package diskimage

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/qemu"
)

const (
	// systemdBoot stands in for a UKI: a real EFI application whose output
	// reaches the serial console (OVMF mirrors ConOut there).
	systemdBoot = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"
	// systemdBootMarker is text only systemd-boot prints: with no loader
	// entries its menu holds just this built-in entry.
	systemdBootMarker = "Reboot Into Firmware Interface"
	// bootTimeout bounds one TCG boot; OVMF alone needs 10-20 s there.
	bootTimeout = 2 * time.Minute
)

// needBootTools skips (or, in CI, fails) when QEMU, OVMF or systemd-boot
// are missing.
func needBootTools(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	needTool(t, qemu.Binary)
	for _, f := range []string{qemu.OVMFCode, qemu.OVMFVars, systemdBoot} {
		if _, err := os.Stat(f); err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("not installed: %v", err)
			}
			t.Fatalf("not installed: %v", err)
		}
	}
}

// TestBootDiskInQEMU boots the disk image on a virtio disk: OVMF must find
// the ESP and run EFI/BOOT/BOOTX64.EFI from it. The UEFI shell ("Shell>",
// a failure marker of the harness) means it found nothing bootable.
func TestBootDiskInQEMU(t *testing.T) {
	needBootTools(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "disk.raw")
	err := Write(p, Options{
		UKI:             systemdBoot,
		Root:            writeInput(t, dir, "root.squashfs", 3*MiB, 5),
		Seed:            "boot test",
		SourceDateEpoch: 1700000000,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	vm := qemu.StartT(t, ctx, qemu.Config{UEFI: true, Disks: []string{p}, MemoryMB: 512, NoReboot: true})
	if _, err := vm.WaitFor(ctx, systemdBootMarker); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`starting Boot[0-9A-F]{4} "UEFI Misc Device"`).MatchString(vm.Console()) {
		t.Errorf("not booted from the virtio disk:\n%s", vm.Tail(30))
	}
}
