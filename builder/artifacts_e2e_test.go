package builder

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/internal/qemu"
)

// bootMarkers are what every boot of the test recipe must print: our init,
// the layer's unit with its file and user, and systemd's multi-user target.
var bootMarkers = []string{
	"osb-init: root ready",
	"os-builder: hello from layer",
	"hello.txt from layer test-hello",
	"uid=",
	"Reached target multi-user.target",
}

func bootAndExpect(t *testing.T, cfg qemu.Config, extra ...string) *qemu.VM {
	t.Helper()
	requireTools(t, "qemu-system-x86_64")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
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
	for _, want := range append(extra, bootMarkers...) {
		if _, err := vm.WaitFor(ctx, want); err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
	}
	return vm
}

// TestBootUKIFromESP boots uki.efi as the removable-media boot file of an
// ESP: the firmware loads it, systemd-stub hands the embedded initrd and
// command line to the kernel, and the OS runs from memory.
func TestBootUKIFromESP(t *testing.T) {
	out := testOutput(t)
	dir := t.TempDir()
	placeholder := filepath.Join(dir, "empty-root")
	if err := os.WriteFile(placeholder, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	esp := filepath.Join(dir, "esp.raw")
	if err := diskimage.Write(esp, diskimage.Options{UKI: filepath.Join(out, fileUKI), Root: placeholder, Seed: "esp-test"}); err != nil {
		t.Fatal(err)
	}
	bootAndExpect(t, qemu.Config{Disks: []string{esp}, ExtraArgs: []string{"-snapshot"}}, "osb-init: starting: mode=memory root=initrd")
}

// TestBootDisk boots disk.raw: the ESP's UKI carries a slim initrd whose init
// takes the root image from the osb-root partition.
func TestBootDisk(t *testing.T) {
	out := testOutput(t)
	// A server's disk is larger than the image: the room after osb-root is
	// where the init creates the data partition for persisted paths.
	disk := filepath.Join(t.TempDir(), "disk.raw")
	if err := run(context.Background(), "cp", "--sparse=always", filepath.Join(out, fileDisk), disk); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(disk)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, fi.Size()+1<<30); err != nil {
		t.Fatal(err)
	}
	bootAndExpect(t, qemu.Config{Disks: []string{disk}}, "root=partlabel:osb-root", "persist: creating osb-data", "osb-probe: boots=1")
}

// TestBootISO boots image.iso as a CD, the way Redfish Virtual Media
// presents it.
func TestBootISO(t *testing.T) {
	out := testOutput(t)
	bootAndExpect(t, qemu.Config{CDROM: filepath.Join(out, fileISO)})
}

// TestBootUKIOverHTTP boots uki.efi through OVMF's native UEFI HTTP boot,
// from a local HTTP server the guest reaches through slirp at 10.0.2.2.
func TestBootUKIOverHTTP(t *testing.T) {
	out := testOutput(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fetched := make(chan string, 8)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched <- r.Method + " " + r.URL.Path
		w.Header().Set("Content-Type", "application/efi")
		http.ServeFile(w, r, filepath.Join(out, fileUKI))
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
	})
	select {
	case f := <-fetched:
		if !strings.HasSuffix(f, "/boot/uki.efi") {
			t.Errorf("firmware fetched %q", f)
		}
	default:
		t.Error("the UKI was never fetched over HTTP")
	}
}
