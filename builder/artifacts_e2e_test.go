package builder

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// bootDepth is how far bootAndExpect follows a boot of the test image
// before it returns. A test boots only as far as its own claims: multi-user
// of the same bytes through the same firmware path is one test's proof,
// not every test's (issue 28).
type bootDepth int

const (
	// toMultiUser: extra, then testutil.TestImageMarkers: the init took
	// its root, the test-hello layer's unit ran, its file and user are
	// there, systemd reached multi-user.target.
	toMultiUser bootDepth = iota
	// toRootReady: extra, then the init's "root ready", printed just
	// before it hands over to systemd (already there when extra holds a
	// later line, e.g. the probe's "osb-probe: boots=N").
	toRootReady
	// toProbeDone: extra, root ready, then the persisted-path probe
	// (os-builder-persist-probe.service, "osb-probe: boots=N") has synced:
	// systemd's "Finished ... persisted-path probe." line, or multi-user
	// (the target is ordered after the units it wants) when systemd no
	// longer prints status because the serial getty holds the console.
	// The disk file may be read or booted again once the VM is stopped.
	toProbeDone
)

func (d bootDepth) String() string {
	switch d {
	case toMultiUser:
		return "multi-user"
	case toRootReady:
		return "root ready"
	case toProbeDone:
		return "probe done"
	}
	return "depth " + strconv.Itoa(int(d))
}

// probeDone ends systemd's "Finished ... - os-builder persisted-path
// probe." line (initrd/pid1 waits for the same line): "Starting" lines end
// in "probe..." instead, and the serial console ends lines with "\r\n".
const probeDone = "persisted-path probe.\r"

// bootAndExpect boots cfg through UEFI and waits for extra and then what
// depth names; the VM is stopped when the test ends.
func bootAndExpect(t *testing.T, cfg qemu.Config, depth bootDepth, extra ...string) *qemu.VM {
	t.Helper()
	buildertest.RequireTools(t, cfg.Binary())
	timeout := 8 * time.Minute
	if cfg.Arch == "arm64" {
		timeout = 25 * time.Minute // an emulated CPU, not a translated one
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	cfg.UEFI = true
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = 2048
	}
	vm, err := qemu.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(vm.Stop)
	waits := [][]string{}
	for _, want := range extra {
		waits = append(waits, []string{want})
	}
	switch depth {
	case toMultiUser:
		for _, want := range testutil.TestImageMarkers {
			waits = append(waits, []string{want})
		}
	case toRootReady:
		waits = append(waits, []string{testutil.RootReady})
	case toProbeDone:
		waits = append(waits, []string{testutil.RootReady}, []string{probeDone, testutil.MultiUser})
	default:
		t.Fatalf("bootAndExpect: unknown %v", depth)
	}
	for _, want := range waits {
		if _, err := vm.WaitFor(ctx, want...); err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
	}
	return vm
}

// TestBootUKIFromESP boots uki.efi as the removable-media boot file of an
// ESP: the firmware loads it, systemd-stub hands the embedded initrd and
// command line to the kernel, and the init takes its root from memory. It
// stops there: the same uki.efi reaches multi-user in TestBootUKIOverHTTP
// (the file) and TestBootISO (the file inside the ISO's ESP).
func TestBootUKIFromESP(t *testing.T) {
	t.Parallel()
	out := testOutput(t)
	dir := t.TempDir()
	placeholder := filepath.Join(dir, "empty-root")
	if err := os.WriteFile(placeholder, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	esp := filepath.Join(dir, "esp.raw")
	if err := diskimage.Write(esp, diskimage.Options{UKI: filepath.Join(out, artifacts.FileUKI), Root: placeholder, Seed: "esp-test"}); err != nil {
		t.Fatal(err)
	}
	bootAndExpect(t, qemu.Config{Disks: []string{esp}, ExtraArgs: []string{"-snapshot"}}, toRootReady, "osb-init: starting: mode=memory root=initrd")
}

// copyDisk copies the built disk.raw sparsely (as dd conv=sparse would) to
// a scratch file, extended by grow bytes: the disk a VM or server boots.
func copyDisk(t *testing.T, grow int64) string {
	t.Helper()
	return copyDiskFrom(t, testOutput(t), grow)
}

// copyDiskFrom is copyDisk of the output directory out's disk.raw.
func copyDiskFrom(t *testing.T, out string, grow int64) string {
	t.Helper()
	disk := filepath.Join(t.TempDir(), "disk.raw")
	if err := command.Run(context.Background(), "cp", "--sparse=always", filepath.Join(out, artifacts.FileDisk), disk); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, fi.Size()+grow); err != nil {
		t.Fatal(err)
	}
	return disk
}

// TestBootDisk boots disk.raw as built, on a disk of its own size: the ESP's
// UKI carries a slim initrd whose init takes the root image from the
// osb-root partition and the persisted paths from the osb-data partition
// the image ships. A second boot of the same file sees the first one's
// data; it stops at the probe's count, the first boot having taken this
// disk.raw to multi-user.
func TestBootDisk(t *testing.T) {
	t.Parallel()
	disk := copyDisk(t, 0)
	vm := bootAndExpect(t, qemu.Config{Disks: []string{disk}}, toMultiUser, "root=partlabel:osb-root",
		"persist: data partition /dev/vda3 mounted", "osb-probe: boots=1")
	vm.Stop()
	vm = bootAndExpect(t, qemu.Config{Disks: []string{disk}}, toRootReady, "osb-probe: boots=2")
	for _, bad := range []string{"WARNING", "creating osb-data", "persist: grew", "persist: moved"} {
		if strings.Contains(vm.Console(), "osb-init: "+bad) {
			t.Errorf("a disk of the image's size printed %q", bad)
		}
	}
}

// TestBootDiskGrows boots disk.raw copied onto a bigger disk, as a server
// or a resized VM disk has it: the init moves the backup GPT to the end,
// grows osb-data to the end of the disk and its file system with it. The
// boot stops once the probe has counted it and synced: its claims are the
// init's, and TestBootDisk takes disk.raw to multi-user.
func TestBootDiskGrows(t *testing.T) {
	t.Parallel()
	const grow = 1 << 30
	disk := copyDisk(t, grow)
	grown := fmt.Sprintf("256 -> %d MiB", 256+grow>>20)
	vm := bootAndExpect(t, qemu.Config{Disks: []string{disk}}, toProbeDone,
		"persist: moved the backup GPT of /dev/vda",
		"persist: grew osb-data (partition 3 of /dev/vda) to the end of the disk: "+grown,
		"persist: grew the file system on /dev/vda3: "+grown,
		"osb-probe: boots=1")
	vm.Stop()

	// The host's e2fsprogs and gdisk agree.
	out := string(testutil.Run(t, testutil.RequireTool(t, "sgdisk"), "-v", disk))
	if !strings.Contains(out, "No problems found") {
		t.Errorf("sgdisk -v:\n%s", out)
	}
	info := string(testutil.Run(t, "sgdisk", "-i", "3", disk))
	start := sgdiskField(t, info, "First sector: ")
	last := sgdiskField(t, info, "Last sector: ")
	fi, err := os.Stat(disk)
	if err != nil {
		t.Fatal(err)
	}
	if want := (fi.Size()/512-33)/2048*2048 - 1; last != want {
		t.Errorf("osb-data ends at sector %d, want %d (the last usable MiB)", last, want)
	}
	hdr := string(testutil.Run(t, testutil.RequireTool(t, "dumpe2fs"), "-h", disk+"?offset="+strconv.FormatInt(start*512, 10)))
	if want := "Block count:              " + strconv.FormatInt((last+1-start)*512/4096, 10); !strings.Contains(hdr, want) {
		t.Errorf("dumpe2fs -h lacks %q:\n%s", want, hdr)
	}
}

// sgdiskField reads a number after label in sgdisk -i output.
func sgdiskField(t *testing.T, out, label string) int64 {
	t.Helper()
	_, rest, ok := strings.Cut(out, label)
	if !ok {
		t.Fatalf("no %q in:\n%s", label, out)
	}
	n, err := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// noDataDisk is disk.raw without its data partition and without room for
// one: osb-data deleted, the file cut after osb-root plus the backup GPT.
func noDataDisk(t *testing.T) string {
	t.Helper()
	sgdisk := testutil.RequireTool(t, "sgdisk")
	disk := copyDisk(t, 0)
	testutil.Run(t, sgdisk, "-d", "3", disk)
	rootEnd := sgdiskField(t, string(testutil.Run(t, sgdisk, "-i", "2", disk)), "Last sector: ") + 1
	if err := os.Truncate(disk, rootEnd*512+1<<20); err != nil {
		t.Fatal(err)
	}
	testutil.Run(t, sgdisk, "-e", disk) // the backup GPT to the new end
	return disk
}

// TestBootDiskWithoutDataPartition: no data partition and no room for one
// (recipe disk.dataSizeMiB: 0 on a disk of the image's size): the OS boots
// with the persisted paths on tmpfs and says so loudly, on the console
// and, at warning priority, in the journal (kernel log). Every line of it
// is printed before multi-user, so the boot stops at the probe's count.
func TestBootDiskWithoutDataPartition(t *testing.T) {
	t.Parallel()
	vm := bootAndExpect(t, qemu.Config{Disks: []string{noDataDisk(t)}}, toRootReady,
		"osb-init: WARNING: persist: ",
		"/var/lib/osb-persist-test are on tmpfs this boot",
		"osb-probe: boots=1")
	if !strings.Contains(vm.Console(), "MiB free after the root partition") {
		t.Error("the warning does not say why there is no data partition")
	}
	// The kernel's copy (printk prefixes a time stamp): it is in the kernel
	// log, which journald imports.
	if !regexp.MustCompile(`\] osb-init: WARNING: persist: `).MatchString(vm.Console()) {
		t.Error("the warning is not in the kernel log")
	}
}

// TestBootDiskPersistRequired: the same disk with osb.persist.required=1
// (recipe persistRequired: true) stops the boot with the reason. The disk
// UKI's command line is fixed, so the kernel and slim initrd are booted
// directly with the disk's command line plus the flag.
func TestBootDiskPersistRequired(t *testing.T) {
	t.Parallel()
	out := testOutput(t)
	buildertest.RequireTools(t, "qemu-system-x86_64")
	cmdline, err := os.ReadFile(filepath.Join(out, artifacts.FileCmdline))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	vm, err := qemu.Start(ctx, qemu.Config{
		UEFI: true, MemoryMB: 2048,
		Kernel: filepath.Join(out, artifacts.FileKernel), Initrd: filepath.Join(out, artifacts.FileNoRoot),
		Append:         "osb.root=partlabel:osb-root " + strings.TrimSpace(string(cmdline)) + " osb.persist.required=1",
		Disks:          []string{noDataDisk(t)},
		FailureMarkers: []string{},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop()
	if _, err := vm.WaitFor(ctx, "osb-init: FATAL: persist: "); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.WaitFor(ctx, "the image requires persistence (osb.persist.required=1)"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(vm.Console(), testutil.RootReady) {
		t.Errorf("the init went on to switch root:\n%s", vm.Tail(40))
	}
}

// TestBootISO boots image.iso as a CD, the way Redfish Virtual Media
// presents it.
func TestBootISO(t *testing.T) {
	t.Parallel()
	out := testOutput(t)
	bootAndExpect(t, qemu.Config{CDROM: filepath.Join(out, artifacts.FileISO)}, toMultiUser)
}

// TestBootUKIOverHTTP boots uki.efi through OVMF's native UEFI HTTP boot,
// from a local HTTP server the guest reaches through slirp at 10.0.2.2.
func TestBootUKIOverHTTP(t *testing.T) {
	t.Parallel()
	out := testOutput(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fetched := make(chan string, 8)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched <- r.Method + " " + r.URL.Path
		w.Header().Set("Content-Type", "application/efi")
		http.ServeFile(w, r, filepath.Join(out, artifacts.FileUKI))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	bootAndExpect(t, qemu.Config{
		MemoryMB: 3072,
		Net: &qemu.NetConfig{
			BootFile:     "http://10.0.2.2:" + strconv.Itoa(port) + "/boot/uki.efi",
			NoROM:        true,
			HTTPBootOnly: true,
		},
	}, toMultiUser)
	select {
	case f := <-fetched:
		if !strings.HasSuffix(f, "/boot/uki.efi") {
			t.Errorf("firmware fetched %q", f)
		}
	default:
		t.Error("the UKI was never fetched over HTTP")
	}
}
