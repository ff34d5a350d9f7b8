package qemutier

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/redfishemu"
)

func needQEMU(t *testing.T) {
	t.Helper()
	testutil.RequireTool(t, qemu.Binary)
	testutil.RequireFiles(t, qemu.OVMFCode, qemu.OVMFVars)
}

func TestSeedDiskGrowsToDiskSize(t *testing.T) {
	m, err := New(Config{Dir: t.TempDir(), DiskSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	src := filepath.Join(t.TempDir(), "image.raw")
	if err := os.WriteFile(src, []byte("GPT and friends"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.SeedDisk(src); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(m.DiskPath())
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 8<<20 || string(b[:15]) != "GPT and friends" {
		t.Errorf("disk: %d bytes starting %q", len(b), b[:15])
	}
}

func TestHostURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://10.0.2.2:8080/blobs/x/image.iso": "http://127.0.0.1:8080/blobs/x/image.iso",
		"http://10.0.2.2/a":                      "http://127.0.0.1/a",
		"https://boot.example:8443/a":            "https://boot.example:8443/a",
	} {
		if got, err := HostURL(in); err != nil || got != want {
			t.Errorf("HostURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// TestDownloadVerifiesAndCaches: media named by digest is checked and
// fetched once; a mismatch is refused.
func TestDownloadVerifiesAndCaches(t *testing.T) {
	body := []byte("an ISO, honestly")
	sum := sha256.Sum256(body)
	var gets atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		w.Write(body)
	}))
	defer srv.Close()
	m, err := New(Config{Dir: t.TempDir(), DiskSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	good := srv.URL + "/blobs/sha256:" + hex.EncodeToString(sum[:]) + "/image.iso"
	for range 2 {
		p, err := m.download(good)
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(p); string(b) != string(body) {
			t.Fatalf("downloaded %q", b)
		}
	}
	if gets.Load() != 1 {
		t.Errorf("%d GETs, want 1 (cached by digest)", gets.Load())
	}
	bad := srv.URL + "/blobs/sha256:" + strings.Repeat("0", 64) + "/image.iso"
	if _, err := m.download(bad); err == nil || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Errorf("bad digest: %v", err)
	}
}

// TestPowerCycleKeepsDisk drives the emulator over HTTP: power on starts
// QEMU booting from the disk, ForceOff stops it, and the disk's bytes
// survive into the next power-on.
func TestPowerCycleKeepsDisk(t *testing.T) {
	needQEMU(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	m, err := New(Config{Dir: t.TempDir(), DiskSize: 16 << 20, MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	marker := []byte("written before the first boot")
	f, err := os.OpenFile(m.DiskPath(), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(marker, 1<<20)
	f.Close()

	var opts redfishemu.Options
	m.Attach(&opts)
	ts := httptest.NewServer(redfishemu.New(opts))
	defer ts.Close()
	reset := func(rt string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", strings.NewReader(`{"ResetType":"`+rt+`"}`))
		req.SetBasicAuth("admin", "password")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("Reset %s: %s", rt, resp.Status)
		}
	}

	reset("On")
	b1, err := m.WaitBoot(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if b1.QEMU.BootFrom != qemu.BootFromDisk || b1.Event.Target != "Hdd" {
		t.Errorf("first boot = %+v", b1)
	}
	if _, err := b1.VM.WaitFor(ctx, "BdsDxe"); err != nil {
		t.Fatal(err)
	}
	reset("ForceOff")
	select {
	case <-b1.VM.Done():
	case <-ctx.Done():
		t.Fatal("ForceOff did not stop QEMU")
	}
	reset("On")
	b2, err := m.WaitBoot(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if m.Running() != b2.VM {
		t.Error("Running is not the latest boot's VM")
	}
	got := make([]byte, len(marker))
	f, _ = os.Open(m.DiskPath())
	f.ReadAt(got, 1<<20)
	f.Close()
	if string(got) != string(marker) {
		t.Errorf("disk lost its bytes across the power cycle: %q", got)
	}
}
