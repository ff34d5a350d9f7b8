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
// registry (v1 and V2, as builder push does) and reads each IronCore Image
// V2 kind back as the IEP reader (osimagetest.ReadV2) finds it there: the
// EFI kind's executable, the UKI kind's kernel and initrd layers with the
// config's command line, and the Disk kind's qcow2 converted back to raw by
// the test reader.
//
// Each kind read back is byte for byte a v1 artifact that other tests boot
// as built, so the test checks that identity (digest and streamed bytes)
// and boots the kinds only with OSB_V2_BOOT_ALL=1, under OVMF (q35, TCG):
// make test has one boot per distinct byte stream and firmware path, not
// two (each costs minutes under TCG).
//   - EFI: the executable layer is the uki.efi file layer (its digest is
//     uki.efi's sha256, the v1 image's very blob). builder
//     TestBootUKIOverHTTP boots uki.efi over OVMF's native HTTP boot to
//     multi-user; boot/e2e TestQEMUBoots/uefi-http-20pct-faults boots this
//     registry blob, streamed by the artifact server, over the same path
//     to our init's start.
//     With OSB_V2_BOOT_ALL=1 it boots here over native UEFI HTTP boot
//     (slirp boot file), streamed from the registry.
//   - UKI: vmlinuz, initrd.img and cmdline, which builder
//     TestBootLiveKernelInitrd boots; with OSB_V2_BOOT_ALL=1 as kernel +
//     its initrd layers concatenated with the config's command line.
//   - Disk: disk.raw, which builder TestBootDisk boots; with
//     OSB_V2_BOOT_ALL=1 as a disk.
func TestV2KindsBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("pushes the test image")
	}
	t.Parallel()
	host := requireRegistry(t)
	if bootAll() {
		testutil.RequireTool(t, qemu.Binary)
		testutil.RequireFiles(t, qemu.OVMFCode, qemu.OVMFVars)
	}
	testutil.RequireTool(t, "qemu-img")
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
		if n := len(v.Layers["executable"]); n != 1 {
			t.Fatalf("the EFI kind has %d executable layers, want 1", n)
		}
		exe := v.Layers["executable"][0]
		uki := filepath.Join(out, "uki.efi")
		if want := testutil.FileSHA256(t, uki); exe.Digest.Algorithm != "sha256" || exe.Digest.Hex != want {
			t.Fatalf("the EFI kind's executable layer is %s, not uki.efi's sha256:%s", exe.Digest, want)
		}
		streamed := filepath.Join(t.TempDir(), "executable.efi")
		writeLayers(t, v, streamed, v.Layers["executable"])
		sameBytes(t, streamed, uki)
		if fi, err := os.Stat(streamed); err != nil {
			t.Fatal(err)
		} else if fi.Size() != exe.Size {
			t.Fatalf("streamed %d bytes of the executable; its descriptor says %d", fi.Size(), exe.Size)
		}
		if !bootAll() {
			t.Log("the executable is the uki.efi TestBootUKIOverHTTP boots over native HTTP (OSB_V2_BOOT_ALL=1 boots it here too)")
			return
		}
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
