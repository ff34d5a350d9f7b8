package builder

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/zstd"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/rootfs"
	"github.com/ironcore-dev/os-builder/initrd/layout"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// bootOperatorTemplateData holds what boot-operator's boot server fills
// into its iPXE templates (its server.IPXETemplateData has these fields).
type bootOperatorTemplateData struct {
	KernelURL, InitrdURL, SquashfsURL, RegistryURL, IPXEServerURL string
}

// bootOperator stands in for IronCore boot-operator's boot server
// (server/bootserver.go) and image proxy for one machine and one image:
// GET /ipxe/ answers the chainload template, /ipxe/UUID the iPXE script
// template (testdata/boot-operator, verbatim upstream text, rendered with
// text/template as boot-operator renders them), /ignition/UUID the
// machine's ignition, and /image?imageName=N&version=V&layerDigest=D the
// image's layer D. The layer URLs are made the way its PXE controller
// (internal/controller/serverbootconfiguration_pxe_controller.go) makes
// them: "%s/image?imageName=%s&version=%s&layerDigest=%s" with the iPXE
// service URL, the image reference split at ":" and the layer's digest.
type bootOperator struct {
	url      string // the iPXE service URL as the guest sees it
	uuid     string
	name     string // image name and version (Spec.Image split at ":")
	version  string
	layers   map[string]string // digest -> file
	ignition []byte

	mu       sync.Mutex
	requests []string // method, path and unescaped query of each request
}

// layerURL is the URL the PXE controller puts in the IPXEBootConfig.
func (b *bootOperator) layerURL(digest string) string {
	return fmt.Sprintf("%s/image?imageName=%s&version=%s&layerDigest=%s", b.url, b.name, b.version, digest)
}

func (b *bootOperator) render(w io.Writer, file string, data bootOperatorTemplateData) error {
	tmpl, err := template.ParseFiles(filepath.Join("testdata", "boot-operator", file))
	if err != nil {
		return err
	}
	return tmpl.Execute(w, data)
}

func (b *bootOperator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	uri := r.URL.Path
	if r.URL.RawQuery != "" { // iPXE escapes the digest's ":"
		q, err := url.QueryUnescape(r.URL.RawQuery)
		if err != nil {
			q = r.URL.RawQuery
		}
		uri += "?" + q
	}
	b.mu.Lock()
	b.requests = append(b.requests, r.Method+" "+uri)
	b.mu.Unlock()
	// boot-operator matches the UUID as given, upper- and lower-cased.
	uuidIs := func(s string) bool { return strings.EqualFold(s, b.uuid) }
	switch p := r.URL.Path; {
	case p == "/ipxe/":
		if err := b.render(w, "ipxe-chainload.tpl", bootOperatorTemplateData{IPXEServerURL: b.url}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	case strings.HasPrefix(p, "/ipxe/") && uuidIs(strings.TrimPrefix(p, "/ipxe/")):
		var buf bytes.Buffer
		err := b.render(&buf, "ipxe-script.tpl", bootOperatorTemplateData{
			KernelURL:     b.layerURL(b.digestOf(artifacts.FileKernel)),
			InitrdURL:     b.layerURL(b.digestOf(artifacts.FileInitrd)),
			SquashfsURL:   b.layerURL(b.digestOf(artifacts.FileRootfs)),
			IPXEServerURL: b.url,
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(buf.Bytes())
	case strings.HasPrefix(p, "/ignition/") && uuidIs(strings.TrimPrefix(p, "/ignition/")):
		_, _ = w.Write(b.ignition)
	case p == "/image":
		q := r.URL.Query()
		file, ok := b.layers[q.Get("layerDigest")]
		if !ok || q.Get("imageName") != b.name || q.Get("version") != b.version {
			http.NotFound(w, r)
			return
		}
		f, err := os.Open(file)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, f)
	default:
		http.NotFound(w, r)
	}
}

// digestOf is the digest of the layer holding the output's file name.
func (b *bootOperator) digestOf(name string) string {
	for d, f := range b.layers {
		if filepath.Base(f) == name {
			return d
		}
	}
	panic("no layer " + name)
}

func (b *bootOperator) log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.requests)
}

// TestBootOperatorIPXE boots the hypervisor image the way IronCore
// boot-operator boots it over PXE: QEMU's own iPXE ROM gets the chainload
// script's URL by DHCP, chains to /ipxe/${uuid} and runs boot-operator's
// iPXE script, text verbatim, which boots the image's kernel and initrd
// (the kernel and initramfs layers, fetched by digest) with the script's
// fixed command line: no osb.* word and no ignition of the image's own.
// The machine's UUID is QEMU's -uuid (SMBIOS), as a server's is. The VM
// has a disk with the image's osb-data partition (a copy of disk.raw).
// The boot must reach multi-user with the ignition served at
// /ignition/UUID applied and every persisted path of the recipe
// bind-mounted from the data partition, from the image's own command line
// in the initrd (docs/cmdline.md), the loader's naming none; gl.url (the
// squashfs layer) is never fetched.
//
// Firmware: the i440FX PC's SeaBIOS and the NIC ROM's legacy iPXE, not
// OVMF. Under UEFI the script's "initrd=initrd" needs iPXE's magic
// "initrd" file (every image but the kernel, as one file), which Debian
// 12's iPXE (ipxe-qemu 1.0.0+git-20190125) predates: there the kernel's
// EFI stub stops with "Failed to open file: initrd", whatever the image.
// iPXE's BIOS loader passes the same images as the initrd, so the initrd
// the kernel gets is the one a current iPXE hands it under UEFI.
func TestBootOperatorIPXE(t *testing.T) {
	t.Parallel() // one QEMU boot of its own
	out := hypervisorOutput(t)
	buildertest.RequireTools(t, "qemu-system-x86_64", "cp")
	own := rootfs.InitrdCmdline(string(testutil.ReadFile(t, filepath.Join(out, artifacts.FileCmdline))))
	persist := persistedPaths(own)
	if len(persist) == 0 {
		t.Fatalf("the hypervisor's cmdline persists no path: %q", own)
	}
	if got, ok := initrdFile(t, filepath.Join(out, artifacts.FileInitrd), layout.CmdlinePath); !ok || got != own+"\n" {
		t.Fatalf("%s's %s = %q (present %v), want %q: built before the initrd carried the image's command line?", artifacts.FileInitrd, layout.CmdlinePath, got, ok, own)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bo := &bootOperator{
		url:      fmt.Sprintf("http://10.0.2.2:%d", ln.Addr().(*net.TCPAddr).Port),
		uuid:     "5f1e0c8a-3b7d-4e29-9c41-6a2d8b0f7e13",
		name:     "registry.local/ironcore/os-builder-hypervisor",
		version:  "e2e",
		layers:   map[string]string{},
		ignition: nodeIgnition(t),
	}
	for _, f := range []string{artifacts.FileKernel, artifacts.FileInitrd, artifacts.FileRootfs} {
		p := filepath.Join(out, f)
		bo.layers["sha256:"+testutil.FileSHA256(t, p)] = p
	}
	srv := &http.Server{Handler: bo}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	vm, err := qemu.Start(ctx, qemu.Config{
		Machine:   "pc",
		MemoryMB:  3072,
		CPUs:      2,
		Net:       &qemu.NetConfig{BootFile: bo.url + "/ipxe/"},
		Disks:     []string{copyDiskFrom(t, out, 0)},
		BootFrom:  qemu.BootFromNet,
		ExtraArgs: []string{"-uuid", bo.uuid},
		SerialLog: os.Getenv("OSB_BOOTOPERATOR_SERIAL_LOG"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop()
	want := []string{
		"gl.url=" + bo.layerURL(bo.digestOf(artifacts.FileRootfs)), // the kernel's command line: the script's
		"osb-init: command line: " + own + " from the image (" + layout.CmdlinePath + ")",
		"osb-init: persist: data partition /dev/vda",
	}
	for _, p := range persist {
		want = append(want, "osb-init: persist: "+p+"\r")
	}
	want = append(want,
		"ignition-apply: config from the kernel command line",
		"ignition-apply: applied",
		"osb-boot-report: reached multi-user.target; failed units: none",
		"root@hv-e2e", // autologin shell: ignition's hostname and drop-in
	)
	for _, w := range want {
		if _, err := vm.WaitFor(ctx, w); err != nil {
			t.Fatalf("waiting for %q: %v\nboot server requests: %q", w, err, bo.log())
		}
	}
	t.Logf("boot-operator's iPXE script to a login in %s", time.Since(start).Round(time.Second))

	checks := []consoleCheck{
		{"cmdline", "cat /proc/cmdline"},
		{"hostname", "hostname"},
		{"failed", "systemctl list-units --failed --no-legend --plain | wc -l"},
	}
	for i, p := range persist {
		checks = append(checks, consoleCheck{"persist-" + string(rune('a'+i)), "findmnt -n -o SOURCE --mountpoint " + p})
	}
	got := consoleChecks(t, ctx, vm, checks)
	if c := got["cmdline"]; !strings.Contains(c, "initrd=initrd gl.ovl=/:tmpfs gl.url=") || !strings.Contains(c, "/ignition/"+bo.uuid) || strings.Contains(c, "osb.") {
		t.Errorf("/proc/cmdline = %q, want boot-operator's script's line with this machine's UUID and no osb.* word", c)
	}
	if got["hostname"] != "hv-e2e" || got["failed"] != "0" {
		t.Errorf("hostname %q (ignition applied: hv-e2e), %s failed units", got["hostname"], got["failed"])
	}
	for i, p := range persist {
		name := "persist-" + string(rune('a'+i))
		if want := "/dev/vda3[/persist" + p + "]"; got[name] != want {
			t.Errorf("%s is mounted from %q, want %q (the data partition)", p, got[name], want)
		}
	}

	// The image is what it is for, booted the way IronCore boots it.
	checkHypervisorServices(t, ctx, vm)

	// The boot server saw boot-operator's sequence: chainload, script,
	// kernel and initramfs by digest, ignition; never the squashfs layer.
	reqs := strings.Join(bo.log(), "\n")
	for _, w := range []string{
		"GET /ipxe/\n",
		"GET /ipxe/" + bo.uuid + "\n",
		"GET " + strings.TrimPrefix(bo.layerURL(bo.digestOf(artifacts.FileKernel)), bo.url) + "\n",
		"GET " + strings.TrimPrefix(bo.layerURL(bo.digestOf(artifacts.FileInitrd)), bo.url) + "\n",
		"GET /ignition/" + bo.uuid,
	} {
		if !strings.Contains(reqs+"\n", w) {
			t.Errorf("the boot server got no %q; requests:\n%s", strings.TrimSpace(w), reqs)
		}
	}
	if strings.Contains(reqs, bo.digestOf(artifacts.FileRootfs)) {
		t.Errorf("the squashfs layer (gl.url) was fetched:\n%s", reqs)
	}
	if t.Failed() {
		t.Logf("console tail:\n%s", vm.Tail(120))
	}
}

// persistedPaths are the paths of a command line's osb.persist=.
func persistedPaths(cmdline string) []string {
	var paths []string
	for _, w := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(w, "osb.persist="); ok {
			paths = strings.Split(v, ",")
		}
	}
	return paths
}

// TestInitrdsCarryCmdline: both initrds of the test recipe's output hold
// the osb.* words of its cmdline at layout.CmdlinePath, the file the init
// merges with the loader's command line.
func TestInitrdsCarryCmdline(t *testing.T) {
	out := testOutput(t)
	own := rootfs.InitrdCmdline(string(testutil.ReadFile(t, filepath.Join(out, artifacts.FileCmdline))))
	if own == "" {
		t.Fatal("the test recipe's cmdline has no osb.* word")
	}
	for _, f := range []string{artifacts.FileInitrd, artifacts.FileNoRoot} {
		if got, ok := initrdFile(t, filepath.Join(out, f), layout.CmdlinePath); !ok || got != own+"\n" {
			t.Errorf("%s: %s = %q (present %v), want %q", f, layout.CmdlinePath, got, ok, own+"\n")
		}
	}
}

// initrdFile reads the file name (an absolute path) from an initrd made of
// concatenated segments, as the kernel unpacks it: uncompressed newc
// archives (the root's layers) and a zstd-compressed one (the init's), NUL
// padding between them. A later segment's file replaces an earlier one's.
func initrdFile(t *testing.T, initrd, name string) (string, bool) {
	t.Helper()
	f, err := os.Open(initrd)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var content string
	found := false
	readArchive := func(r io.Reader) {
		cr := cpio.NewReader(r)
		for {
			h, err := cr.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", initrd, err)
			}
			if "/"+strings.TrimPrefix(h.Name, "/") == name {
				b, err := io.ReadAll(io.LimitReader(cr, layout.MaxCmdline+1))
				if err != nil {
					t.Fatalf("%s: %s: %v", initrd, name, err)
				}
				content, found = string(b), true
			}
		}
	}
	for {
		b, err := br.Peek(6)
		if errors.Is(err, io.EOF) {
			return content, found
		}
		if err != nil {
			t.Fatalf("%s: %v", initrd, err)
		}
		switch {
		case b[0] == 0:
			_, _ = br.ReadByte()
		case string(b) == "070701":
			readArchive(br)
		case bytes.HasPrefix(b, []byte{0x28, 0xb5, 0x2f, 0xfd}):
			zr, err := zstd.NewReader(br)
			if err != nil {
				t.Fatal(err)
			}
			defer zr.Close()
			readArchive(zr)
			return content, found // the compressed segment is the last
		default:
			t.Fatalf("%s: unknown segment starting %q", initrd, b)
		}
	}
}

// TestBootOperatorTemplates: the testdata templates are the upstream bytes
// testdata/boot-operator/SOURCE records, and the script renders to the
// fixed kernel command line the image's own command line must survive.
func TestBootOperatorTemplates(t *testing.T) {
	dir := filepath.Join("testdata", "boot-operator")
	source := string(testutil.ReadFile(t, filepath.Join(dir, "SOURCE")))
	checked := 0
	var file string
	for _, line := range strings.Split(source, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && strings.HasSuffix(f[0], ".tpl"):
			file = f[0]
		case len(f) == 2 && f[0] == "sha256" && file != "":
			if got := testutil.FileSHA256(t, filepath.Join(dir, file)); got != f[1] {
				t.Errorf("%s: sha256 %s, SOURCE records %s: not the upstream text", file, got, f[1])
			}
			checked++
		}
	}
	if checked != 2 {
		t.Fatalf("SOURCE records %d digests, want 2", checked)
	}

	bo := &bootOperator{}
	var buf bytes.Buffer
	data := bootOperatorTemplateData{KernelURL: "K", InitrdURL: "I", SquashfsURL: "S", IPXEServerURL: "http://svc"}
	buildertest.Must(t, bo.render(&buf, "ipxe-script.tpl", data))
	const kernel = "kernel ${kernel-url} initrd=initrd gl.ovl=/:tmpfs gl.url=${squashfs-url} gl.live=1 ip=any ignition.firstboot=1 " +
		"ignition.config.url=${ipxe-svc}/ignition/${uuid} ignition.platform.id=metal console=ttyS0,115200 console=tty0 " +
		"console=ttyAMA0 earlyprintk=ttyS0,115200 consoleblank=0\n"
	for _, want := range []string{"set ipxe-svc http://svc\n", "set kernel-url K\n", "set initrd-url I\n", "set squashfs-url S\n", kernel, "initrd ${initrd-url}\n"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the rendered script lacks %q:\n%s", want, buf.String())
		}
	}
	if strings.Contains(buf.String(), "osb.") {
		t.Errorf("boot-operator's script names an osb.* parameter:\n%s", buf.String())
	}
	// Without a squashfs layer (optional upstream since #352) the gl.*
	// words go; our images always publish root.squashfs.
	buf.Reset()
	data.SquashfsURL = ""
	buildertest.Must(t, bo.render(&buf, "ipxe-script.tpl", data))
	if strings.Contains(buf.String(), "gl.") {
		t.Errorf("without SquashfsURL the script still has gl.* words:\n%s", buf.String())
	}
}
