// Package uefiboot holds what the image packages' QEMU boot tests share: a
// stand-in EFI application, the text proving it ran, and the check that
// QEMU and OVMF are there.
package uefiboot

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

const (
	// SystemdBoot stands in for a UKI: a real EFI application whose output
	// reaches the serial console (OVMF mirrors ConOut there).
	SystemdBoot = "/usr/lib/systemd/boot/efi/systemd-bootx64.efi"
	// SystemdBootMarker is text only systemd-boot prints: with no loader
	// entries its menu holds just this built-in entry.
	SystemdBootMarker = "Reboot Into Firmware Interface"
	// Timeout bounds one TCG boot; OVMF alone needs 10-20 s there.
	Timeout = 2 * time.Minute
)

// Require skips in -short mode, and stops the test by the testutil.Missing
// rule when QEMU, OVMF or systemd-boot are not installed.
func Require(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	testutil.RequireTool(t, qemu.Binary)
	testutil.RequireFiles(t, qemu.OVMFCode, qemu.OVMFVars, SystemdBoot)
}

// BootsFrom boots QEMU with cfg (UEFI, 512 MiB and no reboot are set here),
// waits for systemd-boot's menu and checks that the console matches
// started, OVMF's "starting BootNNNN" line for the device under test: the
// UEFI shell or another device means the image was not bootable.
func BootsFrom(t *testing.T, cfg qemu.Config, started *regexp.Regexp) {
	t.Helper()
	cfg.UEFI, cfg.MemoryMB, cfg.NoReboot = true, 512, true
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	vm := qemutest.StartT(t, ctx, cfg)
	if _, err := vm.WaitFor(ctx, SystemdBootMarker); err != nil {
		t.Fatal(err)
	}
	if !started.MatchString(vm.Console()) {
		t.Errorf("not booted from the device (want %s):\n%s", started, vm.Tail(30))
	}
}
