// Package qemu starts QEMU virtual machines for tests and watches their
// serial console: boot a kernel and initrd, a disk, an ISO or the network,
// then wait for what the console should say, failing fast on what it must
// not say.
package qemu

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// OVMF firmware files of Debian's ovmf package (4 MiB flash layout).
var (
	OVMFCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	OVMFVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

// Binary is the QEMU system emulator used for amd64 guests.
var Binary = "qemu-system-x86_64"

// AAVMF firmware files of Debian's qemu-efi-aarch64 (the arm64 OVMF), and
// the emulator for arm64 guests (qemu-system-arm).
var (
	AAVMFCode   = "/usr/share/AAVMF/AAVMF_CODE.fd"
	AAVMFVars   = "/usr/share/AAVMF/AAVMF_VARS.fd"
	BinaryARM64 = "qemu-system-aarch64"
)

// DefaultFailureMarkers end WaitFor early: each means the boot went wrong.
var DefaultFailureMarkers = []string{
	"Kernel panic",
	"emergency mode",
	"Shell>",
	"osb-init: FATAL",
	"Failed to start",
}

// Config describes a VM.
type Config struct {
	// Arch is the guest's architecture: amd64 ("", a q35 PC) or arm64
	// (the virt machine with the "max" CPU; UEFI is AAVMF, the CD-ROM a
	// virtio-scsi CD, the console its PL011 UART, ttyAMA0). Both run
	// under TCG.
	Arch string
	// Kernel and Initrd are booted directly (-kernel/-initrd) when Kernel is
	// set; Append is the kernel command line.
	Kernel, Initrd, Append string
	// UEFI boots through OVMF (code read-only, a private copy of the vars);
	// otherwise through SeaBIOS.
	UEFI bool
	// SecureBoot runs OVMF's Secure Boot build (OVMFCodeSecureBoot) on an
	// SMM machine with its flash guarded, as a server's firmware is. It
	// enforces only with keys enrolled in Vars (EnrollSecureBoot).
	SecureBoot bool
	// Vars is the variable store the VM gets a private copy of, e.g. one
	// with Secure Boot keys enrolled; empty means OVMFVars.
	Vars string
	// TPMSocket attaches a TPM 2.0 (TIS) backed by the swtpm listening on
	// this control socket (StartTPM).
	TPMSocket string
	// Disks are raw images attached as virtio disks, in order.
	Disks []string
	// DiskSerials are the virtio serials of Disks, by index (missing or
	// empty: none); the guest sees /dev/disk/by-id/virtio-SERIAL.
	DiskSerials []string
	// CDROM is an ISO attached as an IDE (AHCI on q35) CD-ROM.
	CDROM string
	// MemoryMB defaults to 1024.
	MemoryMB int
	// CPUs defaults to 1.
	CPUs int
	// Net nil means no network card.
	Net *NetConfig
	// NoReboot makes a guest reboot end QEMU instead.
	NoReboot bool
	// BootFrom puts one device first in the firmware's boot order
	// (bootindex), the way a BMC's boot override picks the boot device; the
	// other devices follow. Empty leaves the order to the firmware.
	BootFrom BootDevice
	// ExtraArgs are appended to QEMU's command line.
	ExtraArgs []string
	// SerialLog, when set, also receives the console output.
	SerialLog string
	// FailureMarkers replace DefaultFailureMarkers when not nil; an empty
	// non-nil slice disables failure detection.
	FailureMarkers []string
	// Monitor opens a QMP monitor socket (VM.Monitor) to change the VM
	// while it runs, e.g. its NIC's link.
	Monitor bool
	// Machine replaces the x86 machine type q35, e.g. "pc": the i440FX PC,
	// whose SeaBIOS runs a virtio NIC's legacy iPXE ROM (SeaBIOS on q35
	// does not boot from it). Ignored for arm64.
	Machine string
	// Paused starts QEMU with its CPUs stopped (-S) until Monitor.Cont,
	// so a test can change the VM before the firmware runs. Needs Monitor.
	Paused bool
}

// BootDevice names a device class for Config.BootFrom.
type BootDevice string

const (
	BootFromDisk  BootDevice = "disk"  // the first of Config.Disks
	BootFromCDROM BootDevice = "cdrom" // Config.CDROM
	BootFromNet   BootDevice = "net"   // the NIC of Config.Net
)

// NetConfig is QEMU user-mode networking (slirp) with one virtio NIC.
type NetConfig struct {
	// BootFile is the DHCP boot file name: a TFTP path, or an http(s) URL
	// for UEFI HTTP boot / iPXE.
	BootFile string
	// TFTPDir is served over TFTP.
	TFTPDir string
	// ROMFile is the NIC option ROM, e.g. /usr/lib/ipxe/qemu/efi-virtio.rom.
	ROMFile string
	// NoROM loads no option ROM on the NIC, so OVMF's own network stack
	// (native UEFI HTTP boot) drives it instead of iPXE.
	NoROM bool
	// HostForwards are slirp hostfwd rules, e.g. "tcp::2222-:22".
	HostForwards []string
	// HTTPBootOnly disables OVMF's PXE boot options (IPv4 and IPv6), so
	// the firmware goes straight to HTTP boot.
	HTTPBootOnly bool
}

// VM is a running QEMU.
type VM struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	tmpDir  string
	markers []string
	monitor bool

	mu      sync.Mutex
	console bytes.Buffer
	changed chan struct{} // closed and replaced whenever output arrives
	exited  bool
	waitErr error
	done    chan struct{}
	logFile *os.File

	stopOnce sync.Once
	stopped  bool // Stop ended the guest (the boot log's outcome)

	slot    *slot // the machine-wide place the guest holds (slots.go)
	waited  time.Duration
	endLife context.CancelFunc
	record  BootRecord
	start   time.Time
}

// Start starts QEMU for cfg. The VM stops when ctx ends or Stop is called.
func Start(ctx context.Context, cfg Config) (*VM, error) {
	binary := cfg.Binary()
	if _, err := exec.LookPath(binary); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	if cfg.Arch != "" && cfg.Arch != "amd64" && cfg.Arch != "arm64" {
		return nil, fmt.Errorf("qemu: guest architecture %q: want amd64 or arm64", cfg.Arch)
	}
	if cfg.Arch == "arm64" && (cfg.SecureBoot || cfg.TPMSocket != "") {
		return nil, errors.New("qemu: Secure Boot and TPM are not set up for arm64 guests")
	}
	if cfg.Paused && !cfg.Monitor {
		return nil, errors.New("qemu: Config.Paused needs Config.Monitor to resume the VM")
	}
	record, asked := cfg.describe(), time.Now()
	held := takeReservation()
	if held != nil && !strings.Contains(record.Test, ".Test") {
		// Started off the test's stack (a BMC emulator's goroutine): the
		// guest is the reserving test's.
		record.Test = held.reserved.test
	}
	if held == nil {
		var err error
		if held, err = waitSlot(ctx); err != nil {
			return nil, err
		}
	}
	waited := time.Since(asked)
	record.Waited = seconds(waited)
	// The guest lives until ctx's deadline moved by the wait (slots.go).
	ctx, endLife := shifted(ctx, waited)
	tmp, err := os.MkdirTemp("", "osb-qemu-")
	if err != nil {
		held.release()
		endLife()
		return nil, fmt.Errorf("qemu: %w", err)
	}
	vm := &VM{tmpDir: tmp, monitor: cfg.Monitor, changed: make(chan struct{}), done: make(chan struct{}), slot: held, record: record, waited: waited, endLife: endLife}
	vm.markers = DefaultFailureMarkers
	if cfg.FailureMarkers != nil {
		vm.markers = cfg.FailureMarkers
	}
	varsFile := filepath.Join(tmp, "OVMF_VARS.fd")
	if cfg.UEFI {
		template := OVMFVars
		if cfg.Arch == "arm64" {
			template = AAVMFVars
		}
		if cfg.Vars != "" {
			template = cfg.Vars
		}
		if err := copyFile(template, varsFile); err != nil {
			vm.cleanup()
			return nil, fmt.Errorf("qemu: copy OVMF vars: %w", err)
		}
	}
	if cfg.SerialLog != "" {
		if vm.logFile, err = os.Create(cfg.SerialLog); err != nil {
			vm.cleanup()
			return nil, fmt.Errorf("qemu: %w", err)
		}
	}
	vm.cmd = exec.CommandContext(ctx, binary, cfg.Args(varsFile)...)
	vm.cmd.WaitDelay = 5 * time.Second
	if held != nil {
		vm.cmd.ExtraFiles = []*os.File{held.f} // see slots.go
	}
	stdout, err := vm.cmd.StdoutPipe()
	if err != nil {
		vm.cleanup()
		return nil, fmt.Errorf("qemu: %w", err)
	}
	vm.cmd.Stderr = vm.cmd.Stdout // QEMU's own errors belong in the log too
	// Keep stdin open: QEMU's stdio backend would see EOF on /dev/null, and
	// tests may type into the console.
	if vm.stdin, err = vm.cmd.StdinPipe(); err != nil {
		vm.cleanup()
		return nil, fmt.Errorf("qemu: %w", err)
	}
	if err := vm.cmd.Start(); err != nil {
		vm.cleanup()
		return nil, fmt.Errorf("qemu: start %s: %w", binary, err)
	}
	vm.start = time.Now()
	go vm.pump(stdout)
	return vm, nil
}

// Binary is the emulator for the guest's architecture.
func (cfg *Config) Binary() string {
	if cfg.Arch == "arm64" {
		return BinaryARM64
	}
	return Binary
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o600)
}

// pump copies QEMU's output into the console buffer until QEMU exits.
func (vm *VM) pump(r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			vm.mu.Lock()
			vm.console.Write(buf[:n])
			if vm.logFile != nil {
				vm.logFile.Write(buf[:n])
			}
			close(vm.changed)
			vm.changed = make(chan struct{})
			vm.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	werr := vm.cmd.Wait()
	vm.slot.release()
	vm.endLife()
	vm.mu.Lock()
	vm.exited, vm.waitErr = true, werr
	close(vm.changed)
	vm.changed = make(chan struct{})
	vm.record.Ran, vm.record.Outcome = seconds(time.Since(vm.start)), "exited"
	if vm.stopped {
		vm.record.Outcome = "stopped"
	}
	record := vm.record
	vm.mu.Unlock()
	if err := appendBootRecord(record); err != nil {
		fmt.Fprintln(os.Stderr, err) // the table lacks a row; the boot is fine
	}
	close(vm.done)
}

// StripANSI removes terminal escape sequences (CSI "ESC [ ... final" and
// two-byte "ESC x") from s.
func StripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != 0x1b {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '[' {
			j := i + 2
			for j < len(s) && (s[j] < 0x40 || s[j] > 0x7e) {
				j++
			}
			i = j // skip the final byte too
			continue
		}
		i++ // ESC plus one byte
	}
	return b.String()
}

// Console returns everything the VM printed so far, escape sequences
// included.
func (vm *VM) Console() string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.console.String()
}

// Tail returns the last n lines of the console.
func (vm *VM) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(vm.Console(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// SendConsole types s into the serial console.
func (vm *VM) SendConsole(s string) error {
	_, err := io.WriteString(vm.stdin, s)
	return err
}

// ErrFailureMarker is wrapped by WaitFor's error when the console showed a
// failure marker.
var ErrFailureMarker = errors.New("failure marker on console")

// ErrExited is wrapped by WaitFor's error when QEMU exited first.
var ErrExited = errors.New("qemu exited")

// WaitFor waits until the console shows any of want and returns the one
// that appeared first. Terminal escape sequences (systemd's colours) are
// removed before matching. It fails as soon as a failure marker appears before
// it, QEMU exits, or ctx ends; the error carries the console's tail. The
// whole console is searched each time, so a marker seen earlier fails every
// later WaitFor too.
func (vm *VM) WaitFor(ctx context.Context, want ...string) (string, error) {
	ctx, cancel := shifted(ctx, vm.waited) // the slot's wait is not the guest's time
	defer cancel()
	for {
		vm.mu.Lock()
		out := StripANSI(vm.console.String())
		changed, exited, waitErr := vm.changed, vm.exited, vm.waitErr
		vm.mu.Unlock()

		matched, at := firstOf(out, want)
		failed, failAt := firstOf(out, vm.markers)
		switch {
		case matched != "" && (failed == "" || at < failAt):
			return matched, nil
		case failed != "":
			out = vm.restOfLine(ctx, failAt)
			return "", fmt.Errorf("qemu: %w: %q while waiting for %q; console tail:\n%s", ErrFailureMarker, failed, want, tailOf(out, 40))
		case exited:
			return "", fmt.Errorf("qemu: %w (%v) while waiting for %q; console tail:\n%s", ErrExited, waitErr, want, tailOf(out, 40))
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return "", fmt.Errorf("qemu: %w while waiting for %q; console tail:\n%s", ctx.Err(), want, tailOf(out, 40))
		}
	}
}

// restOfLine waits briefly for the line holding position at to end, so a
// failure's reason (printed after its marker) makes it into the error.
func (vm *VM) restOfLine(ctx context.Context, at int) string {
	deadline := time.After(3 * time.Second)
	for {
		vm.mu.Lock()
		out, changed, exited := StripANSI(vm.console.String()), vm.changed, vm.exited
		vm.mu.Unlock()
		if strings.Contains(out[at:], "\n") || exited {
			return out
		}
		select {
		case <-changed:
		case <-deadline:
			return out
		case <-ctx.Done():
			return out
		}
	}
}

// firstOf returns the string of list that occurs earliest in s and where.
func firstOf(s string, list []string) (string, int) {
	best, bestAt := "", -1
	for _, w := range list {
		if w == "" {
			continue
		}
		if i := strings.Index(s, w); i >= 0 && (bestAt < 0 || i < bestAt) {
			best, bestAt = w, i
		}
	}
	return best, bestAt
}

func tailOf(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Stop kills QEMU and removes the VM's temporary files. It is safe to call
// more than once.
func (vm *VM) Stop() {
	vm.stopOnce.Do(func() {
		vm.mu.Lock()
		vm.stopped = !vm.exited
		vm.mu.Unlock()
		if vm.cmd.Process != nil {
			vm.cmd.Process.Kill()
		}
		<-vm.done
		vm.cleanup()
	})
}

// Done is closed when QEMU has exited.
func (vm *VM) Done() <-chan struct{} { return vm.done }

// ExitErr is QEMU's exit error once Done is closed (nil: it exited with
// status 0, e.g. the guest rebooted under NoReboot or powered off); before
// that it is nil too.
func (vm *VM) ExitErr() error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.waitErr
}

func (vm *VM) cleanup() {
	if vm.cmd == nil || vm.cmd.Process == nil {
		vm.slot.release() // never started: pump does not run
	}
	vm.endLife()
	if vm.logFile != nil {
		vm.logFile.Close()
	}
	os.RemoveAll(vm.tmpDir)
}
