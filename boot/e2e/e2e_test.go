// Package e2e boots the test recipe's image end to end: published to a real
// registry, resolved and driven by the boot driver, which speaks Redfish
// (gofish over HTTP) to the emulator's QEMU tier, which boots a real VM. Each
// boot is asserted on the VM's serial console, as deep as its own claims
// need (see depth): that the same bytes reach multi-user over the same
// firmware path is the builder's tests' claim (TestBootUKIOverHTTP,
// TestBootISO, TestBootDisk, TestBootDiskGrows).
package e2e

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/boot/artifacts"
	"github.com/ironcore-dev/os-builder/boot/redfish"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/publish"
	"github.com/ironcore-dev/os-builder/redfishemu"
	"github.com/ironcore-dev/os-builder/redfishemu/qemutier"
)

// env is what all boots share: the pushed image and the artifact server.
type env struct {
	out      string
	ref      name.Reference
	identity *osimage.BootIdentity
	art      *artifacts.Server
	artURL   string // advertised: http://10.0.2.2:PORT

	mu       sync.Mutex
	requests []string // every request the artifact server got
}

// testOutput is the built test image (make test-image), and the tools the
// boots need: skipped without them, except in CI.
func testOutput(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("OSB_TEST_OUTPUT")
	if dir == "" {
		testutil.Missing(t, "OSB_TEST_OUTPUT unset: run `make test-image` and set it (CI runs tests through `make test`)")
	}
	testutil.RequireTool(t, qemu.Binary)
	testutil.RequireFiles(t, qemu.OVMFCode, qemu.OVMFVars, qemutier.DefaultIPXEROM)
	return dir
}

// newEnv starts a registry (Debian's docker-registry process on loopback),
// pushes the test image with publish.Push, and starts the artifact server
// on 127.0.0.1, advertised as 10.0.2.2 for the guest.
func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{out: testOutput(t)}
	ref := testutil.NewRegistry(t) + "/os-images/test:e2e"
	start := time.Now()
	if _, err := publish.Push(t.Context(), e.out, ref, publish.Options{Insecure: true}); err != nil {
		t.Fatal(err)
	}
	t.Logf("pushed %s in %s", ref, time.Since(start).Round(time.Millisecond))
	var err error
	if e.ref, err = name.ParseReference(ref, name.Insecure); err != nil {
		t.Fatal(err)
	}
	// The identity the driver reads (v1 and IronCore Image V2, V2
	// preferred), so the plans made here are serverboot's.
	builds, err := boot.RegistryImage(t.Context(), e.ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(builds) != 1 {
		t.Fatalf("the test image has %d builds, want one", len(builds))
	}
	e.identity = builds[0]

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.artURL = "http://" + qemutier.SlirpHost + ":" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	if e.art, err = artifacts.NewServer(artifacts.RegistrySource{Repo: e.ref.Context()}, filepath.Join(t.TempDir(), "cache"), e.artURL); err != nil {
		t.Fatal(err)
	}
	e.artURL = e.art.BootURL("qemu") // plans carry this boot's token (FetchEvidence)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.requests = append(e.requests, r.Method+" "+r.URL.Path)
		e.mu.Unlock()
		e.art.ServeHTTP(w, r)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return e
}

func (e *env) requestCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.requests)
}

// bmc is one emulated BMC whose system is a QEMU VM.
type bmc struct {
	emu     *redfishemu.Emulator
	machine *qemutier.Machine
	url     string
}

// newBMC makes the (sub)test's machine and the BMC in front of it. It
// first reserves a guest slot (qemu.Reserve) for the rest of the (sub)test:
// the VMs the BMC's power actions start take it, so the wait for a core,
// when other guests hold them all, is over before the caller starts the
// driver's clocks (its contexts, EvidenceTimeout), which know nothing of
// slots. Callers make their contexts after newBMC.
func newBMC(t *testing.T, opts redfishemu.Options, seedDisk string) *bmc {
	t.Helper()
	m, err := qemutier.New(qemutier.Config{Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if seedDisk != "" {
		// The installer issue will make this an install; for now the
		// disk holds the image's disk.raw as if installed.
		if err := m.SeedDisk(seedDisk); err != nil {
			t.Fatal(err)
		}
	}
	waitStart := time.Now()
	release, err := qemu.Reserve(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(release) // after m.Close (cleanups run last first); a running guest keeps it until it ends
	if w := time.Since(waitStart); w > time.Second {
		t.Logf("waited %s for a guest slot", w.Round(time.Second))
	}
	m.Attach(&opts)
	b := &bmc{emu: redfishemu.New(opts), machine: m}
	ts := httptest.NewServer(b.emu)
	t.Cleanup(ts.Close)
	b.url = ts.URL
	t.Cleanup(func() {
		if t.Failed() {
			if vm := m.Running(); vm != nil {
				t.Logf("console tail:\n%s", qemu.StripANSI(vm.Tail(60)))
			}
		}
	})
	return b
}

func (b *bmc) connect(t *testing.T, ctx context.Context) *redfish.Client {
	t.Helper()
	c, err := redfish.Connect(ctx, redfish.Config{Endpoint: b.url, Credentials: redfish.Credentials{Username: "admin", Password: "password"},
		Retry: redfish.Retry{Attempts: 12, Base: 10 * time.Millisecond, Max: 200 * time.Millisecond}, TaskPoll: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func (e *env) plan(t *testing.T, m osimage.BootMethod, policy boot.Policy) *boot.Plan {
	t.Helper()
	p, err := boot.Resolve(e.identity, boot.Request{Image: e.ref.String(), Method: m, Policy: policy, ArtifactBaseURL: e.artURL})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (e *env) driver() *boot.Driver {
	return &boot.Driver{Publisher: e.art, Evidence: e.art.FetchEvidence(), EvidenceTimeout: 5 * time.Minute, PollInterval: 100 * time.Millisecond}
}

// depth is how far expectConsole follows a boot past its want lines.
type depth int

const (
	// initStarted: the want lines only. With want naming our init's
	// start line (osb-init: starting: mode=memory root=initrd), the
	// target's artifact reached the guest and our init runs from it:
	// all a memory boot's driver claims need.
	initStarted depth = iota
	// rootReady: also osb-init: root ready. With want naming
	// root=partlabel:osb-root, a disk boot took the disk's root.
	rootReady
	// multiUser: also testutil.TestImageMarkers, the image's full
	// multi-user (its layer's unit, file and user).
	multiUser
)

func (d depth) String() string {
	return [...]string{"init start", "root ready", "multi-user"}[d]
}

// markers are the lines d adds to a boot's want lines.
func (d depth) markers() []string {
	switch d {
	case rootReady:
		return []string{testutil.RootReady}
	case multiUser:
		return testutil.TestImageMarkers
	}
	return nil
}

// expectConsole waits until the console of the machine's n-th boot shows
// want and, after them, d's markers, failing early on a failure marker
// (panic, osb-init: FATAL, the UEFI shell).
func expectConsole(t *testing.T, ctx context.Context, m *qemutier.Machine, n int, d depth, want ...string) {
	t.Helper()
	b, err := m.WaitBoot(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range append(append([]string{}, want...), d.markers()...) {
		if _, err := b.VM.WaitFor(ctx, w); err != nil {
			t.Fatalf("boot %d (%s): %v", n, b.Event.Target, err)
		}
	}
}

// TestQEMUBoots boots the test image through the driver, Redfish and QEMU
// via every method (UEFI HTTP through a BMC failing 20% of its requests),
// then NetworkBootOnce followed by a reset to disk. The boots run one after
// the other (TCG). A boot whose bytes and firmware path reach multi-user in
// the builder's tests stops once the driver's claims are proven: the
// target, the artifact in the guest, our init started (memory boots) or
// the disk's root ready (disk boots). Full multi-user is kept where no
// other test has it: iPXE, and the disk after a network boot once.
func TestQEMUBoots(t *testing.T) {
	e := newEnv(t)
	disk := filepath.Join(e.out, "disk.raw")
	run := func(t *testing.T, b *bmc, p *boot.Plan, st *boot.State) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
		defer cancel()
		if err := e.driver().Run(ctx, b.connect(t, ctx), p, st); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name     string
		method   osimage.BootMethod
		opts     redfishemu.Options
		seedDisk string
		depth    depth
		want     []string // before depth's markers
		target   string
	}{
		// The HTTP boot goes through a BMC failing 20% of its requests
		// (503, stale ETag) and requiring If-Match. uki.efi (this blob)
		// over OVMF's HTTP boot to multi-user: builder TestBootUKIOverHTTP.
		{"uefi-http-20pct-faults", osimage.BootUEFIHTTP, redfishemu.Options{FaultRate: 0.2, Seed: 7, RequireIfMatch: true}, "",
			initStarted, []string{"osb-init: starting: mode=memory root=initrd"}, "UefiHttp"},
		// The one iPXE boot to multi-user: no other test boots iPXE-EFI.
		{"ipxe", osimage.BootPXE, redfishemu.Options{}, "", multiUser, []string{"iPXE", "osb-init: starting: mode=memory root=initrd"}, "Pxe"},
		// image.iso from a CD to multi-user: builder TestBootISO.
		{"virtual-media", osimage.BootVirtualMedia, redfishemu.Options{InsertRequiresEject: true}, "",
			initStarted, []string{"osb-init: starting: mode=memory root=initrd"}, "Cd"},
		// disk.raw grown to 4 GiB to multi-user: builder TestBootDiskGrows
		// (and network-boot-once-then-disk's second boot below).
		{"disk", osimage.BootDisk, redfishemu.Options{}, disk, rootReady, []string{"root=partlabel:osb-root"}, "Hdd"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBMC(t, tc.opts, tc.seedDisk) // waits for a guest slot
			start := time.Now()
			ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
			defer cancel()
			p := e.plan(t, tc.method, boot.NetworkBootAlways)
			for _, s := range p.Steps {
				if len(s.Scripts) > 0 {
					// What a DHCP server would hand out to iPXE.
					b.machine.SetPXEBootFile(s.Scripts[0].URL)
				}
			}
			before := e.requestCount()
			run(t, b, p, &boot.State{})
			expectConsole(t, ctx, b.machine, 1, tc.depth, tc.want...)
			if boots := b.emu.Boots(); len(boots) != 1 || boots[0].Target != tc.target {
				t.Errorf("emulator boots = %+v, want one %s boot", boots, tc.target)
			}
			if tc.method == osimage.BootDisk && e.requestCount() != before {
				t.Errorf("disk boot fetched from the artifact server: %v", e.requests[before:])
			}
			if tc.opts.FaultRate > 0 && b.emu.Faults() == 0 {
				t.Errorf("no faults injected in %d requests", b.emu.Requests())
			}
			t.Logf("%s boot to %s in %s (%d BMC requests, %d injected faults)", tc.name, tc.depth,
				time.Since(start).Round(time.Second), b.emu.Requests(), b.emu.Faults())
		})
	}

	t.Run("network-boot-once-then-disk", func(t *testing.T) {
		b := newBMC(t, redfishemu.Options{}, disk) // waits for a guest slot
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 12*time.Minute)
		defer cancel()
		p := e.plan(t, osimage.BootUEFIHTTP, boot.NetworkBootOnce)
		st := &boot.State{}
		run(t, b, p, st)
		// The network boot: as uefi-http above, to our init's start.
		expectConsole(t, ctx, b.machine, 1, initStarted, "osb-init: starting: mode=memory root=initrd")
		if c, _ := st.Condition(boot.ConditionDiskPinned); c.Status != boot.ConditionTrue {
			t.Errorf("DiskPinned = %+v", c)
		}
		before := e.requestCount()

		// A reset outside the driver (an operator, a kernel update) boots
		// the installed disk, not the network.
		c := b.connect(t, ctx)
		if err := c.Reset(ctx, "ForceRestart"); err != nil {
			t.Fatal(err)
		}
		// The disk after a network boot once, to multi-user.
		expectConsole(t, ctx, b.machine, 2, multiUser, "root=partlabel:osb-root")
		// The driver, run again with the saved state, does not re-provision;
		// neither does a new plan (say, another artifact server) with it.
		run(t, b, p, st)
		fresh := &boot.State{NetworkBooted: st.NetworkBooted, Conditions: st.Conditions}
		run(t, b, e.plan(t, osimage.BootPXE, boot.NetworkBootOnce), fresh)
		if c, _ := fresh.Condition(boot.ConditionNetworkBootedOnce); c.Reason != "AlreadyNetworkBooted" {
			t.Errorf("NetworkBootedOnce = %+v", c)
		}
		if boots := b.emu.Boots(); len(boots) != 2 || boots[0].Target != "UefiHttp" || boots[1].Target != "Hdd" {
			t.Errorf("emulator boots = %+v, want UefiHttp then Hdd", boots)
		}
		if b.machine.Boots() != 2 {
			t.Errorf("QEMU started %d times, want 2", b.machine.Boots())
		}
		e.mu.Lock()
		if after := e.requests[before:]; len(after) != 0 {
			t.Errorf("the disk boot fetched from the artifact server: %v", after)
		}
		e.mu.Unlock()
		t.Logf("network boot once then disk in %s", time.Since(start).Round(time.Second))
	})
}

// TestQEMUInstall installs the image on the VM's blank disk through the
// driver (install mode disk, NetworkBootOnce): iPXE boots the installer
// (kernel + initrd without root image), which fetches disk.raw from the
// artifact server, writes it to the disk selected by its virtio serial and
// reboots by itself; the QEMU tier turns that into a system reset, and as
// the Once override is used up the node comes up from disk, fetching
// nothing. A re-run of the driver with the saved state installs nothing.
func TestQEMUInstall(t *testing.T) {
	e := newEnv(t)
	b := newBMC(t, redfishemu.Options{}, "") // a blank disk; waits for a guest slot
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	p, err := boot.Resolve(e.identity, boot.Request{Image: e.ref.String(), Policy: boot.NetworkBootOnce, ArtifactBaseURL: e.artURL,
		Install: boot.Install{Mode: osimage.InstallDisk, Target: "serial:" + qemutier.DefaultDiskSerial}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Method != osimage.BootPXE {
		t.Fatalf("install plan boots via %s, want pxe", p.Method)
	}
	b.machine.SetPXEBootFile(p.Steps[1].Scripts[0].URL)
	st := &boot.State{}
	drive := func() {
		t.Helper()
		if err := e.driver().Run(ctx, b.connect(t, ctx), p, st); err != nil {
			t.Fatal(err)
		}
	}
	drive()

	installer, err := b.machine.WaitBoot(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"iPXE", "osb-init: starting: mode=install", "osb-init: install: target",
		"is blank", "osb-init: install: wrote", "osb-init: install: done", "osb-init: install: rebooting"} {
		if _, err := installer.VM.WaitFor(ctx, w); err != nil {
			t.Fatalf("installer: %v", err)
		}
	}
	installed := time.Now()
	before := e.requestCount()
	t.Logf("installed in %s: %s", installed.Sub(start).Round(time.Second),
		lineWith(qemu.StripANSI(installer.VM.Console()), "osb-init: install: wrote"))

	// No driver call in between: the guest's own reboot boots the disk,
	// the one installed disk to reach multi-user.
	expectConsole(t, ctx, b.machine, 2, multiUser, "root=partlabel:osb-root", "osb-probe: boots=1")
	if boots := b.emu.Boots(); len(boots) != 2 || boots[0].Target != "Pxe" || boots[1].Target != "Hdd" {
		t.Errorf("emulator boots = %+v, want Pxe then Hdd", boots)
	}
	if c, _ := st.Condition(boot.ConditionDiskPinned); c.Status != boot.ConditionTrue {
		t.Errorf("DiskPinned = %+v", c)
	}

	// Re-running the driver with the saved state installs nothing.
	drive()
	if n := b.machine.Boots(); n != 2 {
		t.Errorf("QEMU started %d times, want 2", n)
	}
	if s := b.emu.State(); s.PowerState != "On" || s.OverrideTarget != boot.TargetHdd {
		t.Errorf("emulator state after re-run: %+v", s)
	}
	e.mu.Lock()
	if after := e.requests[before:]; len(after) != 0 {
		t.Errorf("the disk boot fetched from the artifact server: %v", after)
	}
	e.mu.Unlock()
	t.Logf("install + disk boot to multi-user in %s (disk boot %s)", time.Since(start).Round(time.Second),
		time.Since(installed).Round(time.Second))
}

func lineWith(s, sub string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}
