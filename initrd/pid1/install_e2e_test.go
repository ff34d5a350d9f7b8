package pid1_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
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

	"github.com/diskfs/go-diskfs/partition/gpt"
	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
)

// These tests boot what the builder made of recipes/test.yaml (the output
// directory named by OSB_TEST_OUTPUT, e.g. out/test), so the init under test
// is the one in its initrds:
//   - vmlinuz + initrd-noroot.img booted directly, with the root image or
//     the disk image fetched over HTTP (slirp's host address 10.0.2.2);
//   - disk.raw installed onto a blank virtual disk, which then boots alone
//     through OVMF's removable-media path (EFI/BOOT/BOOTX64.EFI).
// The image's os-builder-persist-probe.service (layer test-persist) prints
// "osb-probe: boots=N", N counted in the persisted /var/lib/osb-persist-test,
// and "osb-probe: outside=present|absent" for a marker file in /etc, outside
// the persisted paths.

const (
	// probeDone ends systemd's "Finished ... - os-builder persisted-path
	// probe." line, printed once the probe has counted the boot and synced:
	// only then may a test kill the VM. systemd shortens the unit name to
	// the console's width, never the description; "Starting" lines end in
	// "probe..." instead, and the serial console ends lines with "\r\n".
	probeDone = "persisted-path probe.\r"
	// persistedPath is the test recipe's osb.persist path.
	persistedPath = "/var/lib/osb-persist-test"
	// targetSerial is the blank disk's virtio serial: the installer picks
	// it by its udev-style id.
	targetSerial = "osb-target"
	// vmMemoryMB is every VM's RAM: memory mode holds the root image in it.
	vmMemoryMB = 2048
)

// fixture is the output directory under test, served over HTTP.
type fixture struct {
	out            string // OSB_TEST_OUTPUT
	kernel, initrd string // vmlinuz, initrd-noroot.img
	url            string // http://10.0.2.2:PORT, serving out
	url6           string // http://[fec0::2]:PORT, the same over IPv6
	diskImage      string
	rootSHA        string // of root.squashfs, from manifest.json
	diskSHA        string // of disk.raw, from manifest.json

	mu sync.Mutex
	// firstInstall is the installer's "wrote ... MB/s" line of the first
	// complete install onto a blank disk, for TestInstallThroughput.
	firstInstall string
	// booted is the diskDigest of a fresh install (disk.raw onto a blank,
	// or interim-table, 3 GiB target), taken before its first disk boot,
	// set once that boot created osb-data and the probe counted boot 1
	// (TestInstallReinstallKeepsPersistedPaths' first boot): see
	// bootInstalled.
	booted string
}

var (
	fixtureOnce sync.Once
	shared      *fixture
	fixtureErr  error
)

// setup checks the host and OSB_TEST_OUTPUT and starts the HTTP server,
// once for all tests. Missing prerequisites skip the test, or fail it in CI.
func setup(t *testing.T) *fixture {
	t.Helper()
	out := testutil.Output(t, testutil.TestOutputEnv)
	testutil.RequireTool(t, qemu.Binary)
	testutil.RequireFiles(t, qemu.OVMFCode, qemu.OVMFVars)
	fixtureOnce.Do(func() { shared, fixtureErr = newFixture(out) })
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return shared
}

// TestMain removes the fixture's snapshot after all tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if snapshotDir != "" {
		os.RemoveAll(snapshotDir)
	}
	os.Exit(code)
}

// snapshotDir holds hard links to the output directory's files.
var snapshotDir string

// snapshot hard-links the files of out into a new directory and returns
// it, or out itself when it cannot (another file system). The builder
// replaces an output directory as a whole, so a rebuild while the tests run
// (developers share out/test) leaves the linked files, which match the
// linked manifest.json, as they were.
func snapshot(out string) string {
	dir, err := os.MkdirTemp("", "osb-e2e-output-")
	if err != nil {
		return out
	}
	entries, err := os.ReadDir(out)
	if err != nil {
		os.RemoveAll(dir)
		return out
	}
	// manifest.json first: files linked after it are of the same build
	// unless a swap falls in between.
	names := []string{osimage.ManifestFile}
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != osimage.ManifestFile {
			names = append(names, e.Name())
		}
	}
	for _, name := range names {
		if err := os.Link(filepath.Join(out, name), filepath.Join(dir, name)); err != nil {
			os.RemoveAll(dir)
			return out
		}
	}
	snapshotDir = dir
	return dir
}

func newFixture(env string) (*fixture, error) {
	out := snapshot(env)
	m, err := osimage.ReadManifest(out)
	if err != nil {
		return nil, fmt.Errorf("OSB_TEST_OUTPUT=%s: %w", env, err)
	}
	byKind := map[osimage.ArtifactKind]osimage.Artifact{}
	for _, a := range m.Artifacts {
		byKind[a.Kind] = a
	}
	need := func(k osimage.ArtifactKind) (osimage.Artifact, error) {
		a, ok := byKind[k]
		if !ok {
			return a, fmt.Errorf("%s/%s has no %s artifact; rebuild it with the current builder", env, osimage.ManifestFile, k)
		}
		if _, err := os.Stat(filepath.Join(out, a.Path)); err != nil {
			return a, fmt.Errorf("%s artifact: %w", k, err)
		}
		return a, nil
	}
	f := &fixture{out: out}
	for _, x := range []struct {
		kind osimage.ArtifactKind
		path *string
		sha  *string
	}{
		{osimage.KindKernel, &f.kernel, nil},
		{osimage.KindInitrdNoRoot, &f.initrd, nil},
		{osimage.KindRootfs, nil, &f.rootSHA},
		{osimage.KindDisk, &f.diskImage, &f.diskSHA},
	} {
		a, err := need(x.kind)
		if err != nil {
			return nil, err
		}
		if x.path != nil {
			*x.path = filepath.Join(out, a.Path)
		}
		if x.sha != nil {
			*x.sha = a.SHA256
		}
	}
	if base := filepath.Base(f.diskImage); base != "disk.raw" {
		return nil, fmt.Errorf("disk artifact is %s, the tests fetch disk.raw", base)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the artifact server: %w", err)
	}
	// Never closed: it serves every test of the binary and dies with it.
	go http.Serve(ln, http.FileServer(http.Dir(out)))
	f.url = "http://10.0.2.2:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	// slirp's IPv6 host address (fec0::2) leads to the host's ::1.
	ln6, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the IPv6 artifact server: %w", err)
	}
	go http.Serve(ln6, http.FileServer(http.Dir(out)))
	f.url6 = "http://[fec0::2]:" + strconv.Itoa(ln6.Addr().(*net.TCPAddr).Port)
	return f, nil
}

// blankDisk is a sparse, all-zero raw disk of 3 GiB: room for the image,
// and for the osb-data partition the first disk boot creates behind it.
func blankDisk(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "target.raw")
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := fh.Truncate(3 << 30); err != nil {
		t.Fatal(err)
	}
	return p
}

// directBoot boots vmlinuz + initrd-noroot.img through OVMF with append
// as the command line and a NIC on slirp; a guest reboot ends QEMU.
func (f *fixture) directBoot(t *testing.T, ctx context.Context, append string, disk string, failure []string) *qemu.VM {
	t.Helper()
	return qemutest.StartT(t, ctx, f.directConfig(append, disk, failure))
}

// directBootIPv6 is directBoot on an IPv6-only slirp network: no DHCPv4,
// router advertisements for fec0::/64, the host at fec0::2.
func (f *fixture) directBootIPv6(t *testing.T, ctx context.Context, cmdline string, disk string, failure []string) *qemu.VM {
	t.Helper()
	cfg := f.directConfig(cmdline, disk, failure)
	cfg.Net = nil
	cfg.ExtraArgs = append(cfg.ExtraArgs, "-netdev", "user,id=n6,ipv4=off,ipv6=on", "-device", "virtio-net-pci,netdev=n6,romfile=")
	return qemutest.StartT(t, ctx, cfg)
}

func (f *fixture) directConfig(cmdline string, disk string, failure []string) qemu.Config {
	cfg := qemu.Config{
		UEFI: true, Kernel: f.kernel, Initrd: f.initrd, Append: cmdline,
		MemoryMB: vmMemoryMB, NoReboot: true,
		Net:            &qemu.NetConfig{NoROM: true},
		FailureMarkers: failure,
	}
	if disk != "" {
		cfg.ExtraArgs = []string{
			"-drive", "if=none,id=target,format=raw,file=" + disk,
			"-device", "virtio-blk-pci,drive=target,serial=" + targetSerial,
		}
	}
	return cfg
}

// installVM boots the installer for disk.raw onto disk.
func (f *fixture) installVM(t *testing.T, ctx context.Context, disk string) *qemu.VM {
	t.Helper()
	return f.directBoot(t, ctx, f.installCmdline(f.url), disk, []string{"Kernel panic", "osb-init: FATAL"})
}

func (f *fixture) installCmdline(base string) string {
	return fmt.Sprintf("console=ttyS0 osb.mode=install osb.install.image=%s/disk.raw osb.install.sha256=%s osb.install.target=by-id:virtio-%s",
		base, f.diskSHA, targetSerial)
}

// install runs the installer onto disk to completion and returns its
// "wrote ... MB/s" line.
func (f *fixture) install(t *testing.T, disk string) string {
	t.Helper()
	return f.installWith(t, disk, f.installVM)
}

// installWith runs the installer that start boots onto disk to completion.
func (f *fixture) installWith(t *testing.T, disk string, start func(*testing.T, context.Context, string) *qemu.VM) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	began := time.Now()
	vm := start(t, ctx, disk)
	if _, err := vm.WaitFor(ctx, "osb-init: install: rebooting"); err != nil {
		t.Fatal(err)
	}
	select { // -no-reboot: the guest's reboot ends QEMU
	case <-vm.Done():
	case <-ctx.Done():
		t.Fatal("QEMU did not exit after the installer rebooted")
	}
	line := grepLines(vm.Console(), "osb-init: install: wrote")
	t.Logf("install took %v: %s", time.Since(began).Round(time.Second), line)
	return line
}

// installBlank installs onto the blank disk and keeps the first such
// install's rate for TestInstallThroughput.
func (f *fixture) installBlank(t *testing.T, disk string) {
	t.Helper()
	line := f.install(t, disk)
	f.mu.Lock()
	if f.firstInstall == "" {
		f.firstInstall = line
	}
	f.mu.Unlock()
}

// bootDisk boots disk alone through OVMF (no kernel, no network) until the
// probe has counted the boot, and returns the console. The UKI on the ESP
// carries the image's command line: root from partlabel:osb-root.
func (f *fixture) bootDisk(t *testing.T, disk string, want ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	start := time.Now()
	vm := qemutest.StartT(t, ctx, qemu.Config{UEFI: true, Disks: []string{disk}, MemoryMB: vmMemoryMB})
	for _, w := range append([]string{"root=partlabel:osb-root", testutil.RootReady}, append(want, probeDone)...) {
		if _, err := vm.WaitFor(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("disk boot: probe done after %v: %s", time.Since(start).Round(time.Second),
		strings.ReplaceAll(grepLines(qemu.StripANSI(vm.Console()), "osb-probe:"), "\n", "; "))
	vm.Stop()
	return qemu.StripANSI(vm.Console())
}

// bootInstalled proves that the fresh install on disk boots: osb-data is
// created, the persisted path set up, the probe counts boot 1. The
// installer's output depends only on disk.raw and the target's size
// (disk.raw's GUIDs, no clock, no randomness), so once one fresh install
// booted so in this run (f.booted), an install whose diskDigest equals it
// is the same disk and needs no boot of its own. Without such a boot (the
// test runs alone, or the first one failed) it boots disk itself and, if
// that passes, becomes the reference.
func (f *fixture) bootInstalled(t *testing.T, disk string) {
	t.Helper()
	sum := diskDigest(t, disk)
	f.mu.Lock()
	ref := f.booted
	f.mu.Unlock()
	if ref != "" {
		if sum != ref {
			t.Fatalf("the install differs from the fresh install that booted in this run: content digest %s, want %s", sum, ref)
		}
		t.Logf("the installed disk is the one that booted in this run (content digest %s): not booted again", sum)
		return
	}
	f.bootDisk(t, disk, "persist: creating osb-data", "persist: "+persistedPath, "osb-probe: boots=1")
	f.recordBooted(sum)
}

// recordBooted keeps sum, the diskDigest of a fresh install taken before
// it booted as bootInstalled requires, for the installs that follow.
func (f *fixture) recordBooted(sum string) {
	f.mu.Lock()
	if f.booted == "" {
		f.booted = sum
	}
	f.mu.Unlock()
}

// diskDigest is the sha256 of a raw disk's size and of its non-zero 4 KiB
// blocks with their offsets: equal for equal contents however sparse the
// files (a guest's zeros may be written or left as holes), and it reads
// only the data extents (SEEK_DATA/SEEK_HOLE), about disk.raw's size of a
// 3 GiB target.
func diskDigest(t *testing.T, p string) string {
	t.Helper()
	const block = 4096
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		t.Fatal(err)
	}
	size := fi.Size()
	h := sha256.New()
	h.Write(binary.LittleEndian.AppendUint64(nil, uint64(size)))
	buf, zero := make([]byte, 1<<20), make([]byte, block)
	for off := int64(0); off < size; {
		data, err := fh.Seek(off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // only a hole after off
			break
		}
		if err != nil {
			t.Fatalf("%s: SEEK_DATA: %v", p, err)
		}
		hole, err := fh.Seek(data, unix.SEEK_HOLE)
		if err != nil {
			t.Fatalf("%s: SEEK_HOLE: %v", p, err)
		}
		// Whole blocks at block offsets: a hole reads as zeros.
		end := min((hole+block-1)/block*block, size)
		for pos := data / block * block; pos < end; {
			n, err := fh.ReadAt(buf[:min(int64(len(buf)), end-pos)], pos)
			if err != nil && !(errors.Is(err, io.EOF) && pos+int64(n) == end) {
				t.Fatalf("%s: %v", p, err)
			}
			for i := 0; i < n; i += block {
				b := buf[i:min(i+block, n)]
				if !bytes.Equal(b, zero[:len(b)]) {
					h.Write(binary.LittleEndian.AppendUint64(nil, uint64(pos)+uint64(i)))
					h.Write(b)
				}
			}
			pos += int64(n)
		}
		off = end
	}
	return hex.EncodeToString(h.Sum(nil))
}

// partitionNames reads the primary GPT of a raw disk.
func partitionNames(t *testing.T, disk string) []string {
	t.Helper()
	fh, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	table, err := gpt.Read(fh, 512, 512)
	if err != nil {
		t.Fatalf("read the GPT of %s: %v", disk, err)
	}
	var names []string
	for _, p := range table.Partitions {
		if p.Name != "" {
			names = append(names, p.Name)
		}
	}
	return names
}

// TestMemoryModeFromURL boots with the root image fetched over HTTP into
// RAM; a wrong digest is refused before anything is mounted. The good
// boot ends once the probe counted boot 1 (systemd runs the fetched root):
// that the same root layers reach multi-user.target in memory mode is
// builder's TestBootLiveKernelInitrd and TestBootUKIOverHTTP.
func TestMemoryModeFromURL(t *testing.T) {
	f := setup(t)
	t.Run("good digest", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		start := time.Now()
		vm := f.directBoot(t, ctx, fmt.Sprintf("osb.root=%s/root.squashfs osb.root.sha256=%s console=ttyS0", f.url, f.rootSHA), "", nil)
		for _, w := range []string{"osb-init: network: eth", "verified", testutil.RootReady, "osb-probe: boots=1"} {
			if _, err := vm.WaitFor(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("probe counted boot 1 after %v\n%s", time.Since(start).Round(time.Second), grepLines(vm.Console(), "osb-init: "))
	})
	t.Run("wrong digest", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		wrong := strings.Repeat("0", 64)
		vm := f.directBoot(t, ctx, fmt.Sprintf("osb.root=%s/root.squashfs osb.root.sha256=%s console=ttyS0", f.url, wrong), "",
			[]string{"Kernel panic", testutil.RootReady})
		if _, err := vm.WaitFor(ctx, "osb-init: FATAL"); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.WaitFor(ctx, "refusing to use it"); err != nil {
			t.Fatal(err)
		}
		line := grepLines(vm.Console(), "osb-init: FATAL")
		if !strings.Contains(line, "sha256 mismatch") || !strings.Contains(line, f.rootSHA) || !strings.Contains(line, wrong) {
			t.Errorf("FATAL line does not name both digests: %q", line)
		}
	})
}

// TestInstallReinstallKeepsPersistedPaths installs onto a blank disk and
// boots it (the init creates and formats osb-data, the probe counts boot
// 1), reinstalls and boots again: the count in the persisted path goes on
// (2) and a file outside the persisted paths is gone.
func TestInstallReinstallKeepsPersistedPaths(t *testing.T) {
	f := setup(t)
	disk := blankDisk(t)
	f.installBlank(t, disk)
	if got := partitionNames(t, disk); strings.Join(got, ",") != "osb-esp,osb-root" {
		t.Fatalf("installed disk has partitions %v, want osb-esp,osb-root", got)
	}
	fresh := diskDigest(t, disk) // before the boot adds osb-data
	first := f.bootDisk(t, disk, "persist: creating osb-data", "persist: "+persistedPath, "osb-probe: boots=1")
	f.recordBooted(fresh)
	if !strings.Contains(first, "osb-probe: outside=absent") {
		t.Errorf("first boot: %s", grepLines(first, "osb-probe"))
	}
	f.install(t, disk)
	if got := partitionNames(t, disk); strings.Join(got, ",") != "osb-esp,osb-root,osb-data" {
		t.Fatalf("reinstalled disk has partitions %v, want osb-esp,osb-root,osb-data", got)
	}
	second := f.bootDisk(t, disk, "persist: "+persistedPath, "osb-probe: boots=2")
	if strings.Contains(second, "creating osb-data") {
		t.Error("the reinstall lost the data partition: it was created again")
	}
	if !strings.Contains(second, "osb-probe: outside=absent") {
		t.Errorf("a file outside the persisted paths survived: %s", grepLines(second, "osb-probe"))
	}
}

// TestInstallInterrupted kills the installer while it writes, checks that
// the half-written disk cannot boot (interim GPT, no ESP), then installs
// again: that install must end in a disk that boots, which it does as the
// very bytes of a blank-disk install that booted (bootInstalled).
func TestInstallInterrupted(t *testing.T) {
	f := setup(t)
	disk := blankDisk(t)
	func() {
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		defer cancel()
		vm := f.installVM(t, ctx, disk)
		if _, err := vm.WaitFor(ctx, "interim one"); err != nil {
			t.Fatal(err)
		}
		// "fetch: X of Y (R MB/s)" is a progress line: mid-write.
		if _, err := vm.WaitFor(ctx, " of "+f.diskSizeString(t)); err != nil {
			t.Fatal(err)
		}
		vm.Stop()
		if strings.Contains(vm.Console(), "install: done") {
			t.Fatal("the install finished before the VM was killed; the test proves nothing")
		}
		t.Logf("killed the installer at: %s", lastLine(grepLines(vm.Console(), "osb-init: fetch:")))
	}()
	// The interim table holds no partition (the disk was blank): firmware
	// finds no ESP, and the next installer sees an os-builder disk.
	if got := partitionNames(t, disk); len(got) != 0 {
		t.Fatalf("the interrupted disk has partitions %v, want the empty interim table", got)
	}
	f.installBlank(t, disk)
	f.bootInstalled(t, disk)
}

// diskSizeString is how the init prints disk.raw's size in progress lines.
func (f *fixture) diskSizeString(t *testing.T) string {
	t.Helper()
	fi, err := os.Stat(f.diskImage)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%.1f MiB", float64(fi.Size())/(1<<20))
}

var mbps = regexp.MustCompile(`\(([0-9.]+) MB/s\)`)

// TestInstallThroughput compares the installer's write rate (TCG guest,
// HTTP over slirp, sha256, virtio-blk) with dd of the same bytes on the
// host. It uses the first blank-disk install of this run, or does one.
func TestInstallThroughput(t *testing.T) {
	f := setup(t)
	testutil.RequireTool(t, "dd")
	f.mu.Lock()
	line := f.firstInstall
	f.mu.Unlock()
	if line == "" {
		f.installBlank(t, blankDisk(t))
		line = f.firstInstall
	}
	m := mbps.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no rate in %q", line)
	}
	vmRate, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "dd.raw")
	start := time.Now()
	out, err := exec.Command("dd", "if="+f.diskImage, "of="+target, "bs=4M", "conv=fsync", "status=none").CombinedOutput()
	if err != nil {
		t.Fatalf("dd: %v: %s", err, out)
	}
	fi, err := os.Stat(f.diskImage)
	if err != nil {
		t.Fatal(err)
	}
	ddRate := float64(fi.Size()) / 1e6 / time.Since(start).Seconds()
	t.Logf("BENCH install %.1f MB/s (TCG guest, HTTP over slirp, sha256, virtio-blk) vs host dd %.1f MB/s: ratio %.2f", vmRate, ddRate, vmRate/ddRate)
}

func lastLine(s string) string {
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		return s[i+1:]
	}
	return s
}

// TestInstallRefusesLUKSDisk: the real installer, given a disk that is one
// whole-disk LUKS2 volume (cryptsetup on the raw file) and no
// osb.install.wipe=1, stops with a reason naming LUKS2 and the parameter,
// and writes nothing. Before, such a disk (no MBR, no GPT) was "blank".
func TestInstallRefusesLUKSDisk(t *testing.T) {
	f := setup(t)
	cryptsetup := testutil.RequireTool(t, "cryptsetup")
	disk := filepath.Join(t.TempDir(), "luks.raw")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 512<<20); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cryptsetup, "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2",
		"--pbkdf-force-iterations", "1000", "--key-file", "-", disk)
	cmd.Stdin = strings.NewReader("not a secret")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cryptsetup: %v\n%s", err, out)
	}
	before := fileSHA256(t, disk)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	vm := f.directBoot(t, ctx, fmt.Sprintf(
		"console=ttyS0 osb.mode=install osb.install.image=%s/disk.raw osb.install.sha256=%s osb.install.target=by-id:virtio-%s",
		f.url, f.diskSHA, targetSerial), disk, []string{"Kernel panic", "install: rebooting"})
	if _, err := vm.WaitFor(ctx, "osb-init: FATAL"); err != nil {
		t.Fatal(err)
	}
	vm.WaitFor(ctx, "nothing was written")
	line := grepLines(vm.Console(), "osb-init: FATAL")
	for _, want := range []string{"LUKS2 encrypted volume (at byte 0)", "osb.install.wipe=1", "nothing was written"} {
		if !strings.Contains(line, want) {
			t.Errorf("the refusal does not say %q: %s", want, line)
		}
	}
	vm.Stop()
	if fileSHA256(t, disk) != before {
		t.Error("the refused disk was changed")
	}
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestDiskDigest: diskDigest sees contents, not sparseness: written zeros
// and holes are the same, a changed byte (in a block or past the last
// data) is not.
func TestDiskDigest(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, at map[int64][]byte) string {
		p := filepath.Join(dir, name)
		fh, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if err := fh.Truncate(64 << 20); err != nil {
			t.Fatal(err)
		}
		for off, b := range at {
			if _, err := fh.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
		return diskDigest(t, p)
	}
	data := []byte("osb")
	base := write("sparse", map[int64][]byte{5000: data, 40 << 20: data})
	for name, tc := range map[string]struct {
		at   map[int64][]byte
		same bool
	}{
		"zeros written": {map[int64][]byte{0: make([]byte, 8<<20), 5000: data, 40 << 20: data, 60 << 20: make([]byte, 1<<20)}, true},
		"byte changed":  {map[int64][]byte{5000: []byte("osc"), 40 << 20: data}, false},
		"moved":         {map[int64][]byte{5001: data, 40 << 20: data}, false},
		"byte added":    {map[int64][]byte{5000: data, 40 << 20: data, 64<<20 - 1: {1}}, false},
		"byte missing":  {map[int64][]byte{5000: data}, false},
	} {
		if got := write(strings.ReplaceAll(name, " ", "-"), tc.at); (got == base) != tc.same {
			t.Errorf("%s: digest %s, sparse original %s: want same=%v", name, got, base, tc.same)
		}
	}
}
