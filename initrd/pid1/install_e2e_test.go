package pid1_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/initrd"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/uki"
)

// These tests boot the built test image (OSB_TEST_OUTPUT, e.g. out/test) with
// an initrd made from this tree's init, so they test the init as it is now:
// the image's kernel and root image, a slim initrd (no root image inside)
// with the kernel modules of OSB_TEST_ROOTFS (the same kernel) and mke2fs
// taken from the host (Debian, like the image).

// persistProbe is a test-only kernel command line for the installed UKI:
// systemd runs it once per boot (systemd-run-generator). It counts boots in
// a persisted directory and reports whether a file outside the persisted
// paths survived. Only "$"-free shell: systemd would expand "$x".
const persistProbe = `systemd.run="/bin/sh -c '` +
	`mkdir -p /var/lib/osb-persist-test; echo boot >> /var/lib/osb-persist-test/boots; ` +
	`(test -e /etc/osb-outside && echo osb-probe: outside=present || echo osb-probe: outside=absent) > /dev/console; ` +
	`touch /etc/osb-outside; sync; ` +
	"echo osb-probe: boots=`wc -l < /var/lib/osb-persist-test/boots` > /dev/console'\" " +
	`systemd.run_success_action=none systemd.run_failure_action=none`

const persistedPath = "/var/lib/osb-persist-test"

type fixture struct {
	out, kernel, initrd string
	dir                 string
	url                 string // http://10.0.2.2:PORT, serving dir
	diskImage, diskSHA  string
	rootSHA             string
}

var (
	fixtureOnce sync.Once
	shared      *fixture
	fixtureErr  error
)

// TestMain removes the shared fixture's files after all tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

func needEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not set (CI needs it)", name)
		}
		t.Skipf("%s not set", name)
	}
	return v
}

// setup builds the slim initrd, a disk image whose UKI carries the probe,
// and starts the HTTP server, once for all tests.
func setup(t *testing.T) *fixture {
	t.Helper()
	out := needEnv(t, "OSB_TEST_OUTPUT")
	rootfs := needEnv(t, "OSB_TEST_ROOTFS")
	for _, tool := range []string{qemu.Binary, "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s missing: %v", tool, err)
		}
	}
	fixtureOnce.Do(func() { _, fixtureErr = buildFixture(out, rootfs) })
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return shared
}

func buildFixture(out, rootfs string) (*fixture, error) {
	dir, err := os.MkdirTemp("", "osb-install-e2e-")
	if err != nil {
		return nil, err
	}
	f := &fixture{out: out, kernel: filepath.Join(out, "vmlinuz"), dir: dir}
	shared = f // for TestMain's cleanup, even if a later step fails
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	initBin := filepath.Join(dir, "init")
	if err := initrd.BuildInitBinary(ctx, initBin, "amd64"); err != nil {
		return nil, err
	}
	f.initrd = filepath.Join(dir, "initrd-slim.img")
	err = initrd.Assemble(initrd.AssembleOptions{
		Output: f.initrd, InitBinary: initBin, RootFS: rootfs,
		Files: []string{"/sbin/mke2fs", "/etc/mke2fs.conf"}, FilesRoot: "/",
		SourceDateEpoch: 1700000000,
	})
	if err != nil {
		return nil, err
	}
	stub, err := os.ReadFile("/usr/lib/systemd/boot/efi/linuxx64.efi.stub")
	if err != nil {
		return nil, err
	}
	kernel, err := os.ReadFile(f.kernel)
	if err != nil {
		return nil, err
	}
	slim, err := os.ReadFile(f.initrd)
	if err != nil {
		return nil, err
	}
	ukiPath := filepath.Join(dir, "uki.efi")
	err = uki.BuildFile(ukiPath, uki.Options{
		Stub: stub, Kernel: kernel, Initrd: slim,
		Cmdline: "osb.root=partlabel:osb-root osb.persist=" + persistedPath + ",/etc/ssh console=ttyS0 " + persistProbe,
	})
	if err != nil {
		return nil, err
	}
	f.diskImage = filepath.Join(dir, "disk.raw")
	if err := diskimage.Write(f.diskImage, diskimage.Options{UKI: ukiPath, Root: filepath.Join(out, "root.squashfs"), Seed: "install-e2e"}); err != nil {
		return nil, err
	}
	if err := os.Symlink(filepath.Join(out, "root.squashfs"), filepath.Join(dir, "root.squashfs")); err != nil {
		return nil, err
	}
	if f.diskSHA, err = fileSHA256(f.diskImage); err != nil {
		return nil, err
	}
	if f.rootSHA, err = fileSHA256(filepath.Join(out, "root.squashfs")); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go http.Serve(ln, http.FileServer(http.Dir(dir)))
	f.url = "http://10.0.2.2:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	return f, nil
}

func fileSHA256(p string) (string, error) {
	fh, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func blankDisk(t *testing.T, size int64) string {
	p := filepath.Join(t.TempDir(), "target.raw")
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := fh.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return p
}

// installVM boots the installer onto disk, which it sees as a virtio disk
// with serial "osb-target".
func (f *fixture) installVM(t *testing.T, ctx context.Context, disk, sha string) *qemu.VM {
	return qemu.StartT(t, ctx, qemu.Config{
		UEFI: true, Kernel: f.kernel, Initrd: f.initrd, MemoryMB: 1024, NoReboot: true,
		Append: fmt.Sprintf("console=ttyS0 osb.mode=install osb.install.image=%s/disk.raw osb.install.sha256=%s osb.install.target=by-id:virtio-osb-target",
			f.url, sha),
		Net: &qemu.NetConfig{NoROM: true},
		ExtraArgs: []string{
			"-drive", "if=none,id=target,format=raw,file=" + disk,
			"-device", "virtio-blk-pci,drive=target,serial=osb-target",
		},
		FailureMarkers: []string{"Kernel panic", "osb-init: FATAL"},
	})
}

// install runs the installer to completion and returns its MB/s line.
func (f *fixture) install(t *testing.T, disk string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	start := time.Now()
	vm := f.installVM(t, ctx, disk, f.diskSHA)
	if _, err := vm.WaitFor(ctx, "osb-init: install: rebooting"); err != nil {
		t.Fatal(err)
	}
	select { // -no-reboot: the reboot ends QEMU
	case <-vm.Done():
	case <-ctx.Done():
		t.Fatal("QEMU did not exit after the installer rebooted")
	}
	line := grepLines(vm.Console(), "osb-init: install: wrote")
	t.Logf("install took %v: %s", time.Since(start).Round(time.Second), line)
	return line
}

// bootDisk boots disk through OVMF alone (no kernel, no network): the
// firmware finds EFI/BOOT/BOOTX64.EFI on the ESP.
func (f *fixture) bootDisk(t *testing.T, disk string, want ...string) *qemu.VM {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	vm := qemu.StartT(t, ctx, qemu.Config{UEFI: true, Disks: []string{disk}, MemoryMB: 2048})
	for _, w := range append([]string{"root=partlabel:osb-root", "osb-init: root ready"}, want...) {
		if _, err := vm.WaitFor(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("disk boot reached %q after %v", want[len(want)-1], time.Since(start).Round(time.Second))
	vm.Stop()
	return vm
}

// TestMemoryModeFromURL boots with the root image fetched over HTTP into
// RAM; a wrong digest is refused before anything is mounted.
func TestMemoryModeFromURL(t *testing.T) {
	f := setup(t)
	t.Run("good digest", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		vm := qemu.StartT(t, ctx, qemu.Config{
			UEFI: true, Kernel: f.kernel, Initrd: f.initrd, MemoryMB: 2048, NoReboot: true,
			Append: fmt.Sprintf("console=ttyS0 osb.root=%s/root.squashfs osb.root.sha256=%s", f.url, f.rootSHA),
			Net:    &qemu.NetConfig{NoROM: true},
		})
		for _, w := range []string{"osb-init: network: eth", "verified", "osb-init: root ready", "Reached target multi-user.target"} {
			if _, err := vm.WaitFor(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		t.Log(grepLines(vm.Console(), "osb-init: "))
	})
	t.Run("wrong digest", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		wrong := strings.Repeat("0", 64)
		vm := qemu.StartT(t, ctx, qemu.Config{
			UEFI: true, Kernel: f.kernel, Initrd: f.initrd, MemoryMB: 2048, NoReboot: true,
			Append:         fmt.Sprintf("console=ttyS0 osb.root=%s/root.squashfs osb.root.sha256=%s", f.url, wrong),
			Net:            &qemu.NetConfig{NoROM: true},
			FailureMarkers: []string{"Kernel panic", "osb-init: root ready"},
		})
		if _, err := vm.WaitFor(ctx, "osb-init: FATAL"); err != nil {
			t.Fatal(err)
		}
		vm.WaitFor(ctx, "refusing to use it")
		line := grepLines(vm.Console(), "osb-init: FATAL")
		if !strings.Contains(line, "sha256 mismatch") || !strings.Contains(line, f.rootSHA) {
			t.Errorf("FATAL line does not explain the mismatch: %q", line)
		}
	})
}

// TestInstallReinstallKeepsPersistedPaths installs onto a blank disk, boots
// it (the init creates and formats osb-data, the probe counts boot 1),
// reinstalls, boots again: the count in the persisted path goes on (2), a
// file outside the persisted paths is gone.
func TestInstallReinstallKeepsPersistedPaths(t *testing.T) {
	f := setup(t)
	disk := blankDisk(t, 3<<30)
	f.install(t, disk)
	f.bootDisk(t, disk, "persist: creating osb-data", "osb-probe: boots=1")
	f.install(t, disk)
	vm := f.bootDisk(t, disk, "persist: "+persistedPath, "osb-probe: boots=2")
	if strings.Contains(vm.Console(), "creating osb-data") {
		t.Error("the reinstall lost the data partition: it was created again")
	}
	if !strings.Contains(vm.Console(), "osb-probe: outside=absent") {
		t.Errorf("a file outside the persisted paths survived: %s", grepLines(vm.Console(), "osb-probe"))
	}
}

// TestInstallInterrupted kills the VM while the installer writes, then
// installs again: the second install must end in a disk that boots.
func TestInstallInterrupted(t *testing.T) {
	f := setup(t)
	disk := blankDisk(t, 3<<30)
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		vm := f.installVM(t, ctx, disk, f.diskSHA)
		if _, err := vm.WaitFor(ctx, "interim one"); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.WaitFor(ctx, "osb-init: fetch: "); err != nil { // a progress line: mid-write
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		vm.Stop()
		if strings.Contains(vm.Console(), "install: done") {
			t.Fatal("the install finished before the VM was killed; the test proves nothing")
		}
	}()
	// The killed disk must not boot: no ESP in its table.
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		vm := qemu.StartT(t, ctx, qemu.Config{UEFI: true, Disks: []string{disk}, MemoryMB: 1024, NoReboot: true,
			FailureMarkers: []string{"osb-init: root ready"}})
		if _, err := vm.WaitFor(ctx, "Shell>", "BdsDxe: No bootable option", "No bootable device", "Boot Failed", ">>Start PXE"); err != nil {
			t.Logf("half-written disk: %v", err)
		}
		vm.Stop()
	}()
	f.install(t, disk)
	// The probe runs as the default target's unit (systemd-run-generator
	// replaces multi-user.target), so its line marks a finished boot.
	f.bootDisk(t, disk, "osb-probe: boots=1")
}

var mbps = regexp.MustCompile(`\(([0-9.]+) MB/s\)`)

// TestInstallThroughput compares the installer's write rate with dd of the
// same bytes on the host (the virtual disk's backing store).
func TestInstallThroughput(t *testing.T) {
	f := setup(t)
	if _, err := exec.LookPath("dd"); err != nil {
		t.Fatal(err)
	}
	disk := blankDisk(t, 3<<30)
	line := f.install(t, disk)
	m := mbps.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no rate in %q", line)
	}
	vmRate, _ := strconv.ParseFloat(m[1], 64)
	target := filepath.Join(t.TempDir(), "dd.raw")
	start := time.Now()
	out, err := exec.Command("dd", "if="+f.diskImage, "of="+target, "bs=4M", "conv=fsync", "status=none").CombinedOutput()
	if err != nil {
		t.Fatalf("dd: %v: %s", err, out)
	}
	fi, _ := os.Stat(f.diskImage)
	ddRate := float64(fi.Size()) / 1e6 / time.Since(start).Seconds()
	t.Logf("BENCH install %.1f MB/s (TCG guest, HTTP over slirp, sha256, virtio-blk) vs host dd %.1f MB/s: ratio %.2f", vmRate, ddRate, vmRate/ddRate)
}
