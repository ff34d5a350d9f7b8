package isoimage

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/internal/testutil/uefiboot"
)

// TestBootISOInQEMU boots the ISO as a CD: OVMF must find the El Torito
// UEFI entry and run EFI/BOOT/BOOTX64.EFI from its FAT image. The boot
// image is padded past 128 MiB with the boot file at its end, so a boot
// image cut to any 16-bit sector count (even read as 2 KiB units, as EDK II
// does) would not reach the file: this proves the count-0 handling. (With
// the count patched to 0xFFFF the same image ends in the UEFI shell.) Past
// 260 MiB the FAT has 4 KiB clusters, as the hypervisor's boot image does.
func TestBootISOInQEMU(t *testing.T) {
	uefiboot.Require(t)
	for _, tc := range []struct {
		name string
		pad  int64
	}{
		{"512-byte clusters", 130 * mib},
		{"4 KiB clusters", 300 * mib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "image.iso")
			err := Write(p, Options{
				UKI: uefiboot.SystemdBoot,
				// Written before the UKI, so it takes the FAT's first clusters.
				ESPFiles:        map[string]string{"AAAA/PAD.BIN": testutil.SparseZeros(t, dir, "pad", tc.pad)},
				Seed:            "boot test",
				SourceDateEpoch: 1700000000,
			})
			if err != nil {
				t.Fatal(err)
			}
			uefiboot.BootsFrom(t, qemu.Config{CDROM: p}, regexp.MustCompile(`starting Boot[0-9A-F]{4} "UEFI QEMU DVD-ROM`))
		})
	}
}
