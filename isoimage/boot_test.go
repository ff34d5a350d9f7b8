package isoimage

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

// TestBootISOInQEMU boots the ISO as a CD: OVMF must find the El Torito
// UEFI entry and run EFI/BOOT/BOOTX64.EFI from its FAT image. The boot
// image is padded past 128 MiB with the boot file at its end, so a boot
// image cut to any 16-bit sector count (even read as 2 KiB units, as EDK II
// does) would not reach the file: this proves the count-0 handling. (With
// the count patched to 0xFFFF the same image ends in the UEFI shell.)
func TestBootISOInQEMU(t *testing.T) {
	needBootTools(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "image.iso")
	err := Write(p, Options{
		UKI: systemdBoot,
		// Sorted before EFI/, so it takes the FAT's first 130 MiB.
		ESPFiles:        map[string]string{"AAAA/PAD.BIN": writeZeros(t, dir, "pad", 130*mib)},
		Seed:            "boot test",
		SourceDateEpoch: 1700000000,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	vm := qemu.StartT(t, ctx, qemu.Config{UEFI: true, CDROM: p, MemoryMB: 512, NoReboot: true})
	if _, err := vm.WaitFor(ctx, systemdBootMarker); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`starting Boot[0-9A-F]{4} "UEFI QEMU DVD-ROM`).MatchString(vm.Console()) {
		t.Errorf("not booted from the CD:\n%s", vm.Tail(30))
	}
}
