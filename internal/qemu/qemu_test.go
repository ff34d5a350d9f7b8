package qemu

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// needQEMU skips when QEMU or OVMF is missing, except in CI.
func needQEMU(t *testing.T) {
	t.Helper()
	_, err := exec.LookPath(Binary)
	if err == nil {
		_, err = os.Stat(OVMFCode)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("QEMU/OVMF missing in CI: %v", err)
		}
		t.Skipf("QEMU/OVMF missing: %v", err)
	}
}

// startT starts a VM for a test and stops it when the test ends, logging
// the console's tail if the test failed: qemutest.StartT, which this package
// cannot import (qemutest imports qemu).
func startT(t *testing.T, ctx context.Context, cfg Config) *VM {
	t.Helper()
	vm, err := Start(ctx, cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("console tail:\n%s", vm.Tail(60))
		}
		vm.Stop()
	})
	return vm
}

func TestArgs(t *testing.T) {
	cfg := Config{
		Kernel: "/k", Initrd: "/i", Append: "console=ttyS0",
		UEFI: true, Disks: []string{"/d0", "/d1"}, CDROM: "/c.iso", MemoryMB: 1536, NoReboot: true,
		Net: &NetConfig{BootFile: "http://10.0.2.2/uki.efi", TFTPDir: "/tftp",
			ROMFile: "/usr/lib/ipxe/qemu/efi-virtio.rom", HostForwards: []string{"tcp::2222-:22"}, HTTPBootOnly: true},
		ExtraArgs: []string{"-cpu", "max"},
	}
	got := strings.Join(cfg.Args("/tmp/vars.fd"), " ")
	for _, want := range []string{
		"-machine q35,accel=tcg", "-m 1536", "-no-reboot", "-serial stdio",
		"if=pflash,format=raw,unit=0,readonly=on,file=" + OVMFCode,
		"if=pflash,format=raw,unit=1,file=/tmp/vars.fd",
		"-kernel /k -initrd /i -append console=ttyS0",
		"if=virtio,format=raw,index=0,file=/d0", "if=virtio,format=raw,index=1,file=/d1",
		"media=cdrom,readonly=on,format=raw,file=/c.iso",
		"-netdev user,id=n0,tftp=/tftp,bootfile=http://10.0.2.2/uki.efi,hostfwd=tcp::2222-:22 -device virtio-net-pci,netdev=n0,romfile=/usr/lib/ipxe/qemu/efi-virtio.rom",
		"name=opt/org.tianocore/IPv4PXESupport,string=n", "name=opt/org.tianocore/IPv6PXESupport,string=n",
		"-cpu max",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("args lack %q:\n%s", want, got)
		}
	}
	if args := (&Config{}).Args(""); !slices.Contains(args, "none") || slices.Contains(args, "-kernel") {
		t.Errorf("minimal args: %v", args)
	}
}

func TestArgsBootFrom(t *testing.T) {
	base := Config{Disks: []string{"/d0"}, CDROM: "/c.iso", Net: &NetConfig{NoROM: true}}
	for _, tc := range []struct {
		from BootDevice
		want []string
	}{
		{BootFromDisk, []string{"virtio-blk-pci,drive=disk0,bootindex=0", "ide-cd,drive=cd0,bootindex=1", "romfile=,bootindex=2"}},
		{BootFromCDROM, []string{"virtio-blk-pci,drive=disk0,bootindex=1", "ide-cd,drive=cd0,bootindex=0", "romfile=,bootindex=2"}},
		{BootFromNet, []string{"virtio-blk-pci,drive=disk0,bootindex=1", "ide-cd,drive=cd0,bootindex=2", "romfile=,bootindex=0"}},
	} {
		cfg := base
		cfg.BootFrom = tc.from
		got := strings.Join(cfg.Args(""), " ")
		for _, w := range append(tc.want, "if=none,id=disk0,format=raw,file=/d0", "if=none,id=cd0,media=cdrom,readonly=on,format=raw,file=/c.iso") {
			if !strings.Contains(got, w) {
				t.Errorf("%s: args lack %q:\n%s", tc.from, w, got)
			}
		}
	}
}

func TestArgsDiskSerials(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no boot order", Config{Disks: []string{"/d0", "/d1"}, DiskSerials: []string{"s0"}},
			"-drive if=none,id=disk0,format=raw,file=/d0 -device virtio-blk-pci,drive=disk0,serial=s0 -drive if=virtio,format=raw,index=1,file=/d1"},
		{"boot order", Config{Disks: []string{"/d0"}, DiskSerials: []string{"s0"}, BootFrom: BootFromDisk},
			"-device virtio-blk-pci,drive=disk0,serial=s0,bootindex=0"},
	} {
		if got := strings.Join(tc.cfg.Args(""), " "); !strings.Contains(got, tc.want) {
			t.Errorf("%s: args lack %q:\n%s", tc.name, tc.want, got)
		}
	}
}

func TestFirstOf(t *testing.T) {
	for _, tc := range []struct {
		s, want string
		list    []string
	}{
		{"a b c", "b", []string{"c", "b"}},
		{"a b c", "", []string{"x"}},
		{"Shell> ", "Shell>", []string{"", "Shell>"}},
	} {
		if got, _ := firstOf(tc.s, tc.list); got != tc.want {
			t.Errorf("firstOf(%q, %q) = %q, want %q", tc.s, tc.list, got, tc.want)
		}
	}
}

// TestOVMFShellIsFailure boots OVMF with nothing to boot: it ends in the
// UEFI shell, which WaitFor must report as a failure at once rather than
// waiting for its deadline. The VM, started without Config.Monitor, also
// has no monitor to connect to (for TestMonitorNeedsConfig).
func TestOVMFShellIsFailure(t *testing.T) {
	needQEMU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	vm := startT(t, ctx, Config{UEFI: true, MemoryMB: 256})
	if mon, err := vm.Monitor(ctx); err == nil {
		mon.Close()
		t.Error("Monitor on a VM started without Config.Monitor")
	}
	start := time.Now()
	_, err := vm.WaitFor(ctx, "this never appears")
	if !errors.Is(err, ErrFailureMarker) {
		t.Fatalf("WaitFor = %v, want ErrFailureMarker", err)
	}
	if !strings.Contains(err.Error(), "Shell>") {
		t.Errorf("error does not name the marker: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("failure found only at the deadline")
	}
	t.Logf("UEFI shell detected after %v", time.Since(start).Round(time.Millisecond))

	// With the shell not a failure, it is a milestone like any other, and
	// the console can be typed into.
	vm.markers = nil
	if m, err := vm.WaitFor(ctx, "Shell>"); err != nil || m != "Shell>" {
		t.Fatalf("WaitFor(Shell>) = %q, %v", m, err)
	}
	if err := vm.SendConsole("reset -s\r"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-vm.Done():
	case <-ctx.Done():
		t.Fatal("VM did not power off after `reset -s`")
	}
	if _, err := vm.WaitFor(ctx, "never"); !errors.Is(err, ErrExited) {
		t.Errorf("WaitFor after exit = %v, want ErrExited", err)
	}
}

func TestStripANSI(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain",
		"[\x1b[0;32m  OK  \x1b[0m] Reached target \x1b[0;1;39mmulti-user.target\x1b[0m - Multi-User System.": "[  OK  ] Reached target multi-user.target - Multi-User System.",
		"\x1bcreset":                "reset",
		"cut \x1b[0;3":              "cut ",
		"\x1b[2J\x1b[01;01HShell> ": "Shell> ",
	} {
		if got := StripANSI(in); got != want {
			t.Errorf("StripANSI(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestArgsSecureBootTPM: Secure Boot runs the enforcing firmware on an
// SMM machine with guarded flash; a TPM socket adds a TIS TPM.
func TestArgsSecureBootTPM(t *testing.T) {
	got := strings.Join((&Config{UEFI: true, SecureBoot: true, TPMSocket: "/run/tpm.sock"}).Args("/tmp/vars.fd"), " ")
	for _, want := range []string{
		"-machine q35,smm=on,accel=tcg",
		"-global driver=cfi.pflash01,property=secure,value=on",
		"if=pflash,format=raw,unit=0,readonly=on,file=" + OVMFCodeSecureBoot,
		"-chardev socket,id=chrtpm,path=/run/tpm.sock -tpmdev emulator,id=tpm0,chardev=chrtpm -device tpm-tis,tpmdev=tpm0",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("args lack %q:\n%s", want, got)
		}
	}
	if plain := strings.Join((&Config{UEFI: true}).Args("/v"), " "); strings.Contains(plain, "smm=on") || strings.Contains(plain, "secboot") || strings.Contains(plain, "tpm") {
		t.Errorf("plain UEFI args changed: %s", plain)
	}
}

// TestArgsARM64: an arm64 guest is the virt machine with the max CPU,
// AAVMF and its CD on virtio-scsi, run by qemu-system-aarch64.
func TestArgsARM64(t *testing.T) {
	cfg := Config{Arch: "arm64", UEFI: true, Disks: []string{"/d0"}, CDROM: "/c.iso", BootFrom: BootFromCDROM}
	if got := cfg.Binary(); got != BinaryARM64 {
		t.Errorf("Binary() = %q, want %q", got, BinaryARM64)
	}
	got := strings.Join(cfg.Args("/tmp/vars.fd"), " ")
	for _, want := range []string{
		"-machine virt,accel=tcg", "-cpu max,pauth-impdef=on",
		"if=pflash,format=raw,unit=0,readonly=on,file=" + AAVMFCode,
		"-device virtio-scsi-pci,id=scsi0",
		"-device scsi-cd,drive=cd0,bus=scsi0.0,bootindex=0",
		"virtio-blk-pci,drive=disk0,bootindex=1",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("args lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ide-cd") || strings.Contains(got, "q35") {
		t.Errorf("arm64 args have PC devices:\n%s", got)
	}
	if _, err := Start(context.Background(), Config{Arch: "arm64", SecureBoot: true, UEFI: true}); err == nil {
		t.Error("Start of an arm64 Secure Boot VM succeeded")
	}
}
