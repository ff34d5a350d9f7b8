// Package qemutier is the QEMU tier of the Redfish emulator: every power-on
// or reset of the emulated system starts a real QEMU (OVMF, TCG) VM whose
// boot device follows the emulator's state, the way a BMC's boot override
// steers real firmware:
//
//	Cd / UsbCd  the inserted virtual media image, downloaded by the "BMC"
//	            (digest-checked when its URL names one) and attached as a CD
//	UefiHttp    OVMF's native HTTP boot of HttpBootUri (slirp bootfile)
//	Pxe         iPXE (option ROM), chain-loading PXEBootFile, the script URL
//	            a DHCP server would hand out
//	otherwise   the system's own disk
//
// The disk is a raw file in Config.Dir that persists across power cycles;
// ForceOff stops QEMU. QEMU runs with -no-reboot, so a guest reboot (an
// installer's reboot(2)) ends it; the machine then reports a system reset to
// the emulator (Emulator.SystemReset), which boots again with the override
// now in effect, as firmware would after a warm reset: a consumed Once
// override no longer applies, so an installer's reboot boots the disk. A
// guest poweroff looks the same to QEMU (exit status 0) and is also treated
// as a reset; a QEMU that fails (non-zero exit) leaves the machine off. The guest reaches the host's loopback as 10.0.2.2
// (slirp), so artifact servers listen on 127.0.0.1 and advertise 10.0.2.2;
// the emulated BMC, being on the host, maps 10.0.2.2 back to 127.0.0.1 when
// it downloads media.
package qemutier

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/redfishemu"
)

// Defaults of Config.
const (
	DefaultDiskSize         = 4 << 30
	DefaultMemoryMB         = 2048
	DefaultHTTPBootMemoryMB = 3072 // OVMF loads the whole UKI into a RAM disk
	DefaultIPXEROM          = "/usr/lib/ipxe/qemu/efi-virtio.rom"
	// DefaultDiskSerial is the disk's virtio serial: the guest sees
	// /dev/disk/by-id/virtio-osb-disk0, an installer selects it with
	// osb.install.target=serial:osb-disk0.
	DefaultDiskSerial = "osb-disk0"
	// SlirpHost is the address the guest reaches the host's loopback at.
	SlirpHost = "10.0.2.2"
)

// Config configures the machine behind one emulated BMC.
type Config struct {
	// Dir holds the machine's state: disk.raw, downloaded media and
	// console.log (the serial console of the latest boot). Required.
	Dir string
	// DiskSize is the size of a fresh (sparse) disk; default 4 GiB.
	DiskSize int64
	// DiskSerial is the disk's virtio serial; default DefaultDiskSerial.
	DiskSerial string
	// MemoryMB is the guest RAM; default 2048. HTTPBootMemoryMB applies to
	// UefiHttp boots instead; default 3072.
	MemoryMB, HTTPBootMemoryMB int
	// PXEBootFile is what the emulated DHCP server hands an iPXE client: the
	// iPXE script URL. SetPXEBootFile changes it later.
	PXEBootFile string
	// IPXEROM is the NIC option ROM for Pxe boots; default DefaultIPXEROM.
	IPXEROM string
	// HTTPClient downloads virtual media; default http.DefaultClient.
	HTTPClient *http.Client
	// Logf reports what the machine does; default: silent.
	Logf func(format string, args ...any)
}

// Boot is one power-on (or reset) of the machine.
type Boot struct {
	Event redfishemu.BootEvent
	// QEMU is the VM configuration started; VM is nil when Err is set.
	QEMU qemu.Config
	VM   *qemu.VM
	Err  error
}

// Machine is a QEMU-backed system. Attach it to an emulator's Options.
type Machine struct {
	cfg    Config
	ctx    context.Context
	cancel context.CancelFunc
	events chan *redfishemu.BootEvent // nil: power off
	done   chan struct{}

	mu      sync.Mutex
	emu     *redfishemu.Emulator // bound by Attach; receives system resets
	pxeFile string
	vm      *qemu.VM
	boots   []*Boot
	changed chan struct{} // closed and replaced when boots grows
}

// New creates the machine's directory and, unless it exists, a fresh sparse
// disk. The machine is off until the emulator boots it.
func New(cfg Config) (*Machine, error) {
	if cfg.Dir == "" {
		return nil, errors.New("qemutier: Config.Dir is required")
	}
	if cfg.DiskSize == 0 {
		cfg.DiskSize = DefaultDiskSize
	}
	if cfg.DiskSerial == "" {
		cfg.DiskSerial = DefaultDiskSerial
	}
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = DefaultMemoryMB
	}
	if cfg.HTTPBootMemoryMB == 0 {
		cfg.HTTPBootMemoryMB = DefaultHTTPBootMemoryMB
	}
	if cfg.IPXEROM == "" {
		cfg.IPXEROM = DefaultIPXEROM
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "media"), 0o755); err != nil {
		return nil, fmt.Errorf("qemutier: %w", err)
	}
	m := &Machine{cfg: cfg, pxeFile: cfg.PXEBootFile, events: make(chan *redfishemu.BootEvent, 64),
		done: make(chan struct{}), changed: make(chan struct{})}
	if _, err := os.Stat(m.DiskPath()); errors.Is(err, os.ErrNotExist) {
		if err := createSparse(m.DiskPath(), cfg.DiskSize); err != nil {
			return nil, err
		}
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	go m.run()
	return m, nil
}

func createSparse(p string, size int64) error {
	f, err := os.Create(p)
	if err != nil {
		return fmt.Errorf("qemutier: create disk: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("qemutier: size disk: %w", err)
	}
	return f.Close()
}

// DiskPath is the machine's persistent disk (raw).
func (m *Machine) DiskPath() string { return filepath.Join(m.cfg.Dir, "disk.raw") }

// ConsoleLog is the serial console of the latest boot.
func (m *Machine) ConsoleLog() string { return filepath.Join(m.cfg.Dir, "console.log") }

// SeedDisk replaces the disk with a copy of src, e.g. an installed OS's disk
// image, written at its start and grown (sparse) to Config.DiskSize when
// smaller: like an installer writing an image onto a bigger disk, which
// leaves room for partitions the OS adds (osb-data). Call it while the
// machine is off.
func (m *Machine) SeedDisk(src string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("qemutier: seed disk: %w", err)
	}
	defer in.Close()
	tmp := m.DiskPath() + ".seed"
	out, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("qemutier: seed disk: %w", err)
	}
	n, err := io.Copy(out, in)
	if err == nil && n < m.cfg.DiskSize {
		err = out.Truncate(m.cfg.DiskSize)
	}
	if err != nil {
		out.Close()
		os.Remove(tmp)
		return fmt.Errorf("qemutier: seed disk from %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("qemutier: seed disk: %w", err)
	}
	return os.Rename(tmp, m.DiskPath())
}

// SetPXEBootFile sets what the emulated DHCP hands out to iPXE from the next
// boot on.
func (m *Machine) SetPXEBootFile(u string) {
	m.mu.Lock()
	m.pxeFile = u
	m.mu.Unlock()
}

// Attach makes the emulator drive the machine, keeping hooks already set;
// the emulator made from o receives the machine's own resets.
func (m *Machine) Attach(o *redfishemu.Options) {
	prevBoot, prevOff, prevNew := o.OnBoot, o.OnPowerOff, o.OnNew
	o.OnNew = func(e *redfishemu.Emulator) {
		if prevNew != nil {
			prevNew(e)
		}
		m.mu.Lock()
		m.emu = e
		m.mu.Unlock()
	}
	o.OnBoot = func(ev redfishemu.BootEvent) {
		if prevBoot != nil {
			prevBoot(ev)
		}
		m.events <- &ev
	}
	o.OnPowerOff = func() {
		if prevOff != nil {
			prevOff()
		}
		m.events <- nil
	}
}

// run handles power events in order: the BMC's HTTP answer must not wait for
// a VM to start (or an ISO to download). It also watches the running VM: one
// that ends by itself was reset (or crashed) from inside.
func (m *Machine) run() {
	defer close(m.done)
	var exited <-chan struct{} // the running VM's Done; nil while off
	for {
		select {
		case <-m.ctx.Done():
			m.stopVM()
			return
		case <-exited:
			exited = nil
			m.guestExited()
		case ev := <-m.events:
			m.stopVM()
			exited = nil
			if ev == nil {
				m.cfg.Logf("qemu: powered off")
				continue
			}
			b := m.boot(*ev)
			m.mu.Lock()
			m.vm = b.VM
			m.boots = append(m.boots, b)
			close(m.changed)
			m.changed = make(chan struct{})
			m.mu.Unlock()
			if b.VM != nil {
				exited = b.VM.Done()
			}
		}
	}
}

// guestExited handles a QEMU that ended without the machine stopping it.
// Under -no-reboot a clean exit is the guest resetting: the emulator boots
// the system again (its OnBoot queues the event this loop handles next),
// unless it was powered off meanwhile. The ended VM stays readable through
// the Boot that started it.
func (m *Machine) guestExited() {
	m.mu.Lock()
	vm, emu := m.vm, m.emu
	m.vm = nil
	m.mu.Unlock()
	if vm == nil {
		return
	}
	vm.Stop() // reaps QEMU's temporary files
	if err := vm.ExitErr(); err != nil {
		m.cfg.Logf("qemu: exited by itself (%v); the machine stays off until the next power action", err)
		return
	}
	if emu == nil {
		m.cfg.Logf("qemu: guest reset, but no emulator is attached; the machine stays off")
		return
	}
	if emu.SystemReset() {
		m.cfg.Logf("qemu: guest reset; booting again as the emulator's state says")
	}
}

func (m *Machine) stopVM() {
	m.mu.Lock()
	vm := m.vm
	m.vm = nil
	m.mu.Unlock()
	if vm != nil {
		vm.Stop()
	}
}

// boot starts the VM for one boot event.
func (m *Machine) boot(ev redfishemu.BootEvent) *Boot {
	b := &Boot{Event: ev}
	cfg := qemu.Config{UEFI: true, MemoryMB: m.cfg.MemoryMB, Disks: []string{m.DiskPath()},
		DiskSerials: []string{m.cfg.DiskSerial}, NoReboot: true,
		SerialLog: m.ConsoleLog(), BootFrom: qemu.BootFromDisk,
		// A NIC without boot file: the installed OS has a network, but a
		// disk boot fetches nothing.
		Net: &qemu.NetConfig{NoROM: true}}
	switch ev.Target {
	case "UefiHttp":
		cfg.MemoryMB = m.cfg.HTTPBootMemoryMB
		cfg.Net = &qemu.NetConfig{BootFile: ev.HTTPBootURI, NoROM: true, HTTPBootOnly: true}
		cfg.BootFrom = qemu.BootFromNet
	case "Pxe":
		m.mu.Lock()
		pxe := m.pxeFile
		m.mu.Unlock()
		cfg.Net = &qemu.NetConfig{BootFile: pxe, ROMFile: m.cfg.IPXEROM}
		cfg.BootFrom = qemu.BootFromNet
	case "Cd", "UsbCd":
		if ev.MediaImage == "" {
			break // an empty drive: the firmware falls through to the disk
		}
		iso, err := m.download(ev.MediaImage)
		if err != nil {
			b.Err = err
			m.cfg.Logf("qemu: boot %s: %v", ev.Target, err)
			return b
		}
		cfg.CDROM = iso
		cfg.BootFrom = qemu.BootFromCDROM
	}
	b.QEMU = cfg
	vm, err := qemu.Start(m.ctx, cfg)
	if err != nil {
		b.Err = err
		m.cfg.Logf("qemu: boot %s: %v", ev.Target, err)
		return b
	}
	b.VM = vm
	m.cfg.Logf("qemu: booting from %s (target %s), console in %s", cfg.BootFrom, ev.Target, m.ConsoleLog())
	return b
}

var digestInURL = regexp.MustCompile(`sha256:([0-9a-f]{64})`)

// HostURL maps a URL the guest uses to one the host (the BMC) can reach:
// slirp's 10.0.2.2 is the host's loopback.
func HostURL(u string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	if pu.Hostname() == SlirpHost {
		port := pu.Port()
		pu.Host = "127.0.0.1"
		if port != "" {
			pu.Host += ":" + port
		}
	}
	return pu.String(), nil
}

// download fetches virtual media like a BMC does before presenting it. A URL
// naming a sha256 digest (the artifact server's content-addressed URLs) is
// verified and cached under it; other URLs are fetched on every boot.
func (m *Machine) download(image string) (string, error) {
	want := ""
	if sm := digestInURL.FindStringSubmatch(image); sm != nil {
		want = sm[1]
	}
	dst := filepath.Join(m.cfg.Dir, "media", "current.iso")
	if want != "" {
		dst = filepath.Join(m.cfg.Dir, "media", want+".iso")
		if _, err := os.Stat(dst); err == nil {
			return dst, nil
		}
	}
	u, err := HostURL(image)
	if err != nil {
		return "", fmt.Errorf("virtual media %s: %w", image, err)
	}
	req, err := http.NewRequestWithContext(m.ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("virtual media %s: %w", image, err)
	}
	resp, err := m.cfg.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("virtual media %s: %w", image, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("virtual media %s: HTTP %s", image, resp.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "download-*")
	if err != nil {
		return "", fmt.Errorf("virtual media: %w", err)
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), resp.Body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("virtual media %s: %w", image, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); want != "" && got != want {
		return "", fmt.Errorf("virtual media %s: sha256 mismatch: got %s", image, got)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("virtual media: %w", err)
	}
	return dst, nil
}

// Boots returns the number of boots so far.
func (m *Machine) Boots() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.boots)
}

// WaitBoot waits for the n-th boot (1-based) to have started and returns it;
// a boot that failed to start returns its error.
func (m *Machine) WaitBoot(ctx context.Context, n int) (*Boot, error) {
	for {
		m.mu.Lock()
		have, changed := len(m.boots), m.changed
		var b *Boot
		if have >= n {
			b = m.boots[n-1]
		}
		m.mu.Unlock()
		if b != nil {
			if b.Err != nil {
				return b, fmt.Errorf("boot %d (%s): %w", n, b.Event.Target, b.Err)
			}
			return b, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for boot %d (have %d): %w", n, have, ctx.Err())
		}
	}
}

// Running is the VM of the latest boot, nil while the machine is off.
func (m *Machine) Running() *qemu.VM {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vm
}

// Close stops the VM; the disk stays.
func (m *Machine) Close() {
	m.cancel()
	<-m.done
}
