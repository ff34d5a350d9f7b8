package pid1_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/programs"
	"github.com/ironcore-dev/os-builder/initrd"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// testRootfs returns the Debian root tree with a kernel (systemd-sysv,
// linux-image-amd64, udev, kmod) given by OSB_TEST_ROOTFS, from which
// TestBootMemoryMode builds an initrd with this tree's init. It is a
// developer's shortcut: CI leaves it unset and boots the same path from
// the builder's output (builder tests, and the OSB_TEST_OUTPUT tests
// here), so the test skips without it, even in CI.
func testRootfs(t *testing.T) (rootfs, kernel string) {
	t.Helper()
	rootfs = os.Getenv("OSB_TEST_ROOTFS")
	if rootfs == "" {
		t.Skip("OSB_TEST_ROOTFS not set (developer-only; CI boots the builder's initrd.img instead)")
	}
	testutil.RequireTool(t, qemu.Binary)
	testutil.RequireTool(t, "go")
	testutil.RequireFiles(t, qemu.OVMFCode, qemu.OVMFVars)
	kernels, _ := filepath.Glob(filepath.Join(rootfs, "boot/vmlinuz-*"))
	if len(kernels) != 1 {
		t.Fatalf("want one kernel in %s/boot, found %v", rootfs, kernels)
	}
	return rootfs, kernels[0]
}

func buildInitrd(t *testing.T, rootfs, rootImage string) string {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	initBin := filepath.Join(dir, "init")
	if err := programs.BuildInitBinary(ctx, initBin, "amd64"); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "initrd.img")
	err := initrd.Assemble(initrd.AssembleOptions{
		Output: out, InitBinary: initBin, RootFS: rootfs, RootImage: rootImage,
		SourceDateEpoch: 1700000000,
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBootMemoryMode boots the rootfs from RAM: squashfs inside the initrd,
// loop device, tmpfs overlay, switch to systemd, up to multi-user.target.
func TestBootMemoryMode(t *testing.T) {
	rootfs, kernel := testRootfs(t)
	testutil.RequireTool(t, "mksquashfs")
	img := filepath.Join(t.TempDir(), "root.squashfs")
	// zstd level 3: this test is about booting, not about the image size.
	cmd := exec.Command("mksquashfs", rootfs, img, "-comp", "zstd", "-Xcompression-level", "3",
		"-noappend", "-no-progress", "-quiet", "-reproducible", "-mkfs-time", "0", "-all-time", "0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v\n%s", err, out)
	}
	initrdPath := buildInitrd(t, rootfs, img)
	fi, _ := os.Stat(initrdPath)
	t.Logf("initrd: %d MiB", fi.Size()>>20)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	vm := qemutest.StartT(t, ctx, qemu.Config{
		UEFI: true, Kernel: kernel, Initrd: initrdPath, MemoryMB: 1536,
		Append:    "console=ttyS0 osb.debug=1",
		NoReboot:  true,
		SerialLog: filepath.Join(t.TempDir(), "serial.log"),
	})
	if _, err := vm.WaitFor(ctx, testutil.RootReady); err != nil {
		t.Fatal(err)
	}
	initDone := time.Since(start)
	if _, err := vm.WaitFor(ctx, testutil.MultiUser); err != nil {
		t.Fatal(err)
	}
	t.Logf("TCG boot: init switched root after %v, multi-user.target after %v", initDone.Round(time.Second), time.Since(start).Round(time.Second))
	for _, want := range []string{"osb-init: starting: mode=memory root=initrd"} {
		if !strings.Contains(vm.Console(), want) {
			t.Errorf("console lacks %q", want)
		}
	}
	if strings.Contains(vm.Console(), "osb-init: WARNING") {
		t.Logf("module warnings:\n%s", grepLines(vm.Console(), "osb-init: WARNING"))
	}
}

// TestBootFatalOnBadCmdline proves that a bad command line stops the boot
// with a reason on the console, not a kernel panic. It boots the builder's
// vmlinuz and initrd-noroot.img (OSB_TEST_OUTPUT) through SeaBIOS: the
// init stops before it needs anything else.
func TestBootFatalOnBadCmdline(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	vm := qemutest.StartT(t, ctx, qemu.Config{
		Kernel: f.kernel, Initrd: f.initrd, MemoryMB: 512, NoReboot: true,
		Append: "console=ttyS0 osb.mode=memory osb.frobnicate=1",
		// Watch for the FATAL line itself; only a panic is a failure here.
		FailureMarkers: []string{"Kernel panic"},
	})
	if _, err := vm.WaitFor(ctx, "osb-init: FATAL"); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.WaitFor(ctx, "docs/cmdline.md"); err != nil {
		t.Fatal(err)
	}
	line := grepLines(vm.Console(), "osb-init: FATAL")
	if !strings.Contains(line, "unknown parameter osb.frobnicate") {
		t.Errorf("FATAL line does not name the parameter: %q", line)
	}
	// The default (osb.fatal=stay) stays: the guest does not reboot, which
	// with -no-reboot would end QEMU.
	select {
	case <-vm.Done():
		t.Errorf("QEMU ended after the FATAL line without osb.fatal=reboot:\n%s", vm.Tail(10))
	case <-time.After(8 * time.Second):
	}
}

// TestBootFatalReboot proves osb.fatal=reboot:SECONDS: a cheap fatal (a bad
// osb.root value) prints the reason, counts down and reboots the guest,
// which with -no-reboot ends QEMU. It boots the builder's vmlinuz and
// initrd-noroot.img (OSB_TEST_OUTPUT) through SeaBIOS.
func TestBootFatalReboot(t *testing.T) {
	f := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	vm := qemutest.StartT(t, ctx, qemu.Config{
		Kernel: f.kernel, Initrd: f.initrd, MemoryMB: 512, NoReboot: true,
		Append:         "console=ttyS0 osb.fatal=reboot:3 osb.root=bogus",
		FailureMarkers: []string{"Kernel panic"},
	})
	for _, want := range []string{`osb-init: FATAL: kernel command line: osb.root="bogus"`, "osb-init: rebooting in 3 s", "osb-init: rebooting in 1 s", "osb-init: rebooting now"} {
		if _, err := vm.WaitFor(ctx, want); err != nil {
			t.Fatalf("%s: %v\n%s", want, err, vm.Tail(20))
		}
	}
	fatalAt := time.Now()
	select {
	case <-vm.Done():
		t.Logf("QEMU ended %v after the init said it reboots", time.Since(fatalAt).Round(time.Millisecond))
	case <-time.After(60 * time.Second):
		t.Fatalf("the guest did not reboot within 60 s of the countdown:\n%s", vm.Tail(20))
	}
	if !strings.Contains(vm.Console(), "reboot: Restarting system") {
		t.Errorf("the kernel did not say it restarts:\n%s", vm.Tail(10))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return strings.Join(out, "\n")
}
