package publish_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/diskimage/qcow2/qcow2test"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
	"github.com/ironcore-dev/os-builder/publish"
)

// TestV2KindsBoot pushes the test image (make test-image) to a real
// registry (v1 and V2, as builder push does) and boots each IronCore Image V2 kind as the IEP reader
// (osimagetest.ReadV2) finds it there, under OVMF (q35, TCG): the EFI
// kind's executable over native UEFI HTTP boot (slirp boot file), the UKI
// kind as kernel + its initrd layers concatenated with the config's
// command line, and the Disk kind's qcow2 converted back to raw by the
// test reader and booted as a disk.
//
// The UKI and Disk kinds read back are byte for byte the v1 artifacts
// (vmlinuz, initrd.img and cmdline; disk.raw) that the builder's
// TestBootLiveKernelInitrd and TestBootDisk boot as built, so the test
// checks that identity and boots them only with OSB_V2_BOOT_ALL=1: make
// test has one boot per distinct byte stream, not two (each costs minutes
// under TCG). The EFI kind always boots: its path (a registry layer
// streamed to native UEFI HTTP boot) is this test's own.
func TestV2KindsBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	t.Parallel()
	host := requireRegistry(t)
	testutil.RequireTool(t, qemu.Binary)
	testutil.RequireTool(t, "qemu-img")
	testutil.RequireFiles(t, qemu.OVMFCode, qemu.OVMFVars)
	out := testutil.Output(t, testutil.TestOutputEnv)
	ctx := context.Background()
	ref := host + "/os-images/v2boot:test"
	start := time.Now()
	if _, err := publish.Push(ctx, out, ref, insecure); err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed %s in %v", out, time.Since(start).Round(time.Second))
	idx, err := publish.Open(ctx, ref, insecure)
	if err != nil {
		t.Fatal(err)
	}
	read := func(t *testing.T, artifactType string) *osimagetest.V2View {
		t.Helper()
		v, err := osimagetest.ReadV2(idx, artifactType, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	t.Run("EFI", func(t *testing.T) {
		t.Parallel()
		v := read(t, "application/vnd.ironcore+efi")
		exe := v.Layers["executable"][0]
		fetched := make(chan string, 8)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fetched <- r.URL.Path
			rc := layerReader(t, v, exe)
			defer rc.Close()
			w.Header().Set("Content-Type", "application/efi")
			w.Header().Set("Content-Length", strconv.FormatInt(exe.Size, 10))
			io.Copy(w, rc)
		})}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
		bootV2(t, qemu.Config{Net: &qemu.NetConfig{
			BootFile: "http://10.0.2.2:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + "/v2/" + exe.Digest.Hex + ".efi",
			NoROM:    true, HTTPBootOnly: true,
		}})
		select {
		case <-fetched:
		default:
			t.Error("the EFI executable was never fetched over HTTP")
		}
	})
	t.Run("UKI", func(t *testing.T) {
		t.Parallel()
		v := read(t, "application/vnd.ironcore+uki")
		dir := t.TempDir()
		kernel, initrd := filepath.Join(dir, "kernel.efi"), filepath.Join(dir, "initrd")
		writeLayers(t, v, kernel, v.Layers["kernel"])
		writeLayers(t, v, initrd, v.Layers["initrd"])
		sameBytes(t, kernel, filepath.Join(out, "vmlinuz"))
		sameBytes(t, initrd, filepath.Join(out, "initrd.img"))
		if own := strings.TrimSpace(string(testutil.ReadFile(t, filepath.Join(out, "cmdline")))); v.Config.Cmdline != own {
			t.Fatalf("the UKI kind's config cmdline %q is not the image's %q", v.Config.Cmdline, own)
		}
		if !bootAll() {
			t.Log("kernel, initrd and cmdline are the v1 artifacts TestBootLiveKernelInitrd boots (OSB_V2_BOOT_ALL=1 boots them here too)")
			return
		}
		bootV2(t, qemu.Config{Kernel: kernel, Initrd: initrd, Append: v.Config.Cmdline})
	})
	t.Run("Disk", func(t *testing.T) {
		t.Parallel()
		v := read(t, "application/vnd.ironcore+disk")
		dir := t.TempDir()
		q := filepath.Join(dir, "disk.qcow2")
		writeLayers(t, v, q, v.Layers["disk"])
		raw := filepath.Join(dir, "disk.raw")
		qcow2ToRaw(t, q, raw)
		// The round trip gives disk.raw back, as qemu-img reads both.
		if cmp := testutil.Run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", filepath.Join(out, "disk.raw"), raw); !strings.Contains(string(cmp), "Images are identical.") {
			t.Fatalf("the Disk kind read back is not disk.raw: %s", cmp)
		}
		sameBytes(t, raw, filepath.Join(out, "disk.raw"))
		if !bootAll() {
			t.Log("the disk read back is the disk.raw TestBootDisk boots as built (OSB_V2_BOOT_ALL=1 boots it here too)")
			return
		}
		bootV2(t, qemu.Config{Disks: []string{raw}}, "root=partlabel:osb-root")
	})
}

// bootAll: OSB_V2_BOOT_ALL=1 boots every kind, also those whose bytes
// another test boots.
func bootAll() bool { return os.Getenv("OSB_V2_BOOT_ALL") == "1" }

// sameBytes fails unless the files have the same sha256.
func sameBytes(t *testing.T, got, want string) {
	t.Helper()
	if g, w := testutil.FileSHA256(t, got), testutil.FileSHA256(t, want); g != w {
		t.Fatalf("%s (sha256 %s) read back from the registry is not %s (sha256 %s)", got, g, want, w)
	}
}

func bootV2(t *testing.T, cfg qemu.Config, extra ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg.UEFI, cfg.MemoryMB = true, 3072
	start := time.Now()
	vm, err := qemu.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop()
	for _, want := range append(extra, testutil.TestImageMarkers...) {
		if _, err := vm.WaitFor(ctx, want); err != nil {
			t.Fatalf("waiting for %q: %v\n%s", want, err, vm.Tail(40))
		}
	}
	t.Logf("booted to multi-user in %v", time.Since(start).Round(time.Second))
}

// layerReader streams a layer from the registry, checked against its
// digest by go-containerregistry.
func layerReader(t *testing.T, v *osimagetest.V2View, d v1.Descriptor) io.ReadCloser {
	t.Helper()
	l, err := v.Image.LayerByDigest(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// writeLayers writes the layers, in order, into one file.
func writeLayers(t *testing.T, v *osimagetest.V2View, path string, layers []v1.Descriptor) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, d := range layers {
		rc := layerReader(t, v, d)
		_, err := io.Copy(f, rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func qcow2ToRaw(t *testing.T, q, raw string) {
	t.Helper()
	in, err := os.Open(q)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		t.Fatal(err)
	}
	img, err := qcow2test.Open(in, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := out.Truncate(img.VirtualSize); err != nil {
		t.Fatal(err)
	}
	if err := img.WriteRaw(out); err != nil {
		t.Fatal(err)
	}
}
