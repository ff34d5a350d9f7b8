package boot_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/boot/artifacts"
	"github.com/ironcore-dev/os-builder/boot/redfish"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/redfishemu"
)

// fakeImage is a small image with the osimage media types and annotations.
type fakeImage struct {
	Ref    name.Reference
	Blobs  map[osimage.ArtifactKind][]byte
	Reg    *httptest.Server
	Cmdine string
}

var layerTypes = []struct {
	kind osimage.ArtifactKind
	mt   string
	name string
}{
	{osimage.KindUKI, osimage.MediaTypeUKI, "uki.efi"},
	{osimage.KindKernel, osimage.MediaTypeKernel, "vmlinuz"},
	{osimage.KindInitrd, osimage.MediaTypeInitramfs, "initrd.img"},
	{osimage.KindISO, osimage.MediaTypeISO, "image.iso"},
	{osimage.KindDisk, osimage.MediaTypeDisk, "disk.raw"},
}

// pushImage pushes an image with the given artifact kinds to a real
// in-process registry and returns its reference.
func pushImage(t testing.TB, reg *httptest.Server, repo string, kinds []osimage.ArtifactKind, methods []osimage.BootMethod, def osimage.BootMethod) *fakeImage {
	t.Helper()
	fi := &fakeImage{Blobs: map[osimage.ArtifactKind][]byte{}, Reg: reg, Cmdine: "console=ttyS0 osb.mode=memory"}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.MediaType(osimage.MediaTypeConfig))
	for _, lt := range layerTypes {
		found := false
		for _, k := range kinds {
			found = found || k == lt.kind
		}
		if !found {
			continue
		}
		b := bytes.Repeat([]byte(string(lt.kind)+"-payload "), 1000+len(lt.name))
		fi.Blobs[lt.kind] = b
		var err error
		img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(b, types.MediaType(lt.mt)), MediaType: types.MediaType(lt.mt),
			Annotations: map[string]string{osimage.AnnotationTitle: lt.name}})
		if err != nil {
			t.Fatal(err)
		}
	}
	var ms []string
	for _, m := range methods {
		ms = append(ms, string(m))
	}
	img = mutate.Annotations(img, map[string]string{
		osimage.AnnotationBootMethods: strings.Join(ms, ","),
		osimage.AnnotationBootDefault: string(def),
		osimage.AnnotationCmdline:     fi.Cmdine,
	}).(v1.Image)
	ref, err := name.ParseReference(strings.TrimPrefix(reg.URL, "http://")+"/"+repo+":latest", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	fi.Ref = ref
	return fi
}

func newRegistry(t testing.TB) *httptest.Server {
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	return reg
}

// rig is one emulated BMC, an artifact server for an image, and a
// "firmware" that fetches what the emulated system boots.
type rig struct {
	t        testing.TB
	emu      *redfishemu.Emulator
	bmcURL   string
	art      *artifacts.Server
	artURL   string
	img      *fakeImage
	mu       sync.Mutex
	fetched  map[string][]byte // URL -> body the firmware got
	pxeURL   string            // what DHCP would hand out for Pxe
	bmcHTTP  *httptest.Server
	bmcDead  atomic.Bool
	patchHit atomic.Int64
	// machineDown: the machine fetches nothing when booted (it hangs
	// before its firmware asks for the boot file).
	machineDown atomic.Bool
}

func newRig(t testing.TB, img *fakeImage, opts redfishemu.Options) *rig {
	t.Helper()
	r := &rig{t: t, img: img, fetched: map[string][]byte{}}
	opts.OnBoot = r.firmware
	r.emu = redfishemu.New(opts)
	r.bmcHTTP = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.bmcDead.Load() {
			// A dead BMC: the connection drops without an answer.
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
		r.emu.ServeHTTP(w, req)
		if req.Method == http.MethodPatch {
			r.patchHit.Add(1)
		}
	}))
	t.Cleanup(r.bmcHTTP.Close)
	r.bmcURL = r.bmcHTTP.URL
	if img != nil {
		as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.art.ServeHTTP(w, req) }))
		t.Cleanup(as.Close)
		r.artURL = as.URL
		var err error
		if r.art, err = artifacts.NewServer(artifacts.RegistrySource{Repo: img.Ref.Context()}, filepath.Join(t.TempDir(), "cache"), as.URL); err != nil {
			t.Fatal(err)
		}
		r.artURL = r.art.BootURL(r.bmcURL) // plans carry this boot's token (FetchEvidence)
	}
	return r
}

// firmware plays the booting machine: it fetches its boot file like UEFI
// HTTP boot, iPXE or the virtual CD drive would.
func (r *rig) firmware(ev redfishemu.BootEvent) {
	if r.machineDown.Load() {
		return
	}
	var u string
	switch ev.Target {
	case "UefiHttp":
		u = ev.HTTPBootURI
	case "Pxe":
		u = r.pxeURL
	case "Cd", "UsbCd":
		u = ev.MediaImage
	}
	if u == "" {
		return
	}
	resp, err := http.Get(u)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		r.mu.Lock()
		r.fetched[u] = b
		r.mu.Unlock()
	}
}

func (r *rig) connect(ctx context.Context) *redfish.Client {
	r.t.Helper()
	c, err := redfish.Connect(ctx, redfish.Config{Endpoint: r.bmcURL, Credentials: redfish.Credentials{Username: "admin", Password: "password"},
		Retry: redfish.Retry{Attempts: 10, Base: time.Millisecond, Max: 20 * time.Millisecond}, TaskPoll: time.Millisecond})
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// readIdentity reads the boot identity of the image ref names from its
// registry.
func readIdentity(tb testing.TB, ref name.Reference) *osimage.BootIdentity {
	tb.Helper()
	img, err := remote.Image(ref)
	if err != nil {
		tb.Fatal(err)
	}
	id, err := osimage.ReadIdentity(img)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

func (r *rig) plan(method osimage.BootMethod, policy boot.Policy) *boot.Plan {
	r.t.Helper()
	p, err := boot.Resolve(readIdentity(r.t, r.img.Ref), boot.Request{Image: r.img.Ref.String(), Method: method, Policy: policy, ArtifactBaseURL: r.artURL})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, s := range p.Steps {
		if len(s.Scripts) > 0 {
			r.pxeURL = s.Scripts[0].URL
		}
	}
	return p
}

func (r *rig) driver() *boot.Driver {
	d := &boot.Driver{PollInterval: time.Millisecond, EvidenceTimeout: 5 * time.Second}
	if r.art != nil {
		d.Publisher, d.Evidence = r.art, r.art.FetchEvidence()
	}
	return d
}

func allKinds() []osimage.ArtifactKind {
	return []osimage.ArtifactKind{osimage.KindUKI, osimage.KindKernel, osimage.KindInitrd, osimage.KindISO, osimage.KindDisk}
}

func allMethods() []osimage.BootMethod {
	return []osimage.BootMethod{osimage.BootUEFIHTTP, osimage.BootPXE, osimage.BootVirtualMedia, osimage.BootDisk}
}

func TestBootPaths(t *testing.T) {
	reg := newRegistry(t)
	img := pushImage(t, reg, "os/all", allKinds(), allMethods(), osimage.BootUEFIHTTP)
	tests := []struct {
		name         string
		method       osimage.BootMethod
		opts         redfishemu.Options
		wantTarget   string
		wantFetched  osimage.ArtifactKind // "" = nothing fetched
		wantInserted bool
	}{
		{"uefi-http", osimage.BootUEFIHTTP, redfishemu.Options{}, "UefiHttp", osimage.KindUKI, false},
		{"pxe", osimage.BootPXE, redfishemu.Options{}, "Pxe", "", false},
		{"virtual-media", osimage.BootVirtualMedia, redfishemu.Options{InsertRequiresEject: true}, "Cd", osimage.KindISO, true},
		{"virtual-media-supermicro", osimage.BootVirtualMedia, redfishemu.Options{Manufacturer: "Supermicro"}, "UsbCd", osimage.KindISO, true},
		{"disk", osimage.BootDisk, redfishemu.Options{}, "Hdd", "", false},
		{"uefi-http-async-reset", osimage.BootUEFIHTTP, redfishemu.Options{AsyncReset: true, TaskPolls: 3}, "UefiHttp", osimage.KindUKI, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			r := newRig(t, img, tc.opts)
			if tc.wantInserted {
				// Something is in the drive already; the plan must eject it.
				c := r.connect(ctx)
				if err := c.InsertMedia(ctx, "http://old.example/old.iso"); err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
			p := r.plan(tc.method, boot.NetworkBootAlways)
			c := r.connect(ctx)
			defer c.Close()
			st := &boot.State{}
			if err := r.driver().Run(ctx, c, p, st); err != nil {
				t.Fatal(err)
			}
			boots := r.emu.Boots()
			if len(boots) != 1 || boots[0].Target != tc.wantTarget {
				t.Fatalf("boots = %+v, want one boot of %s", boots, tc.wantTarget)
			}
			snap := r.emu.State()
			if snap.OverrideEnabled != "Disabled" {
				t.Errorf("Once override not consumed: %+v", snap)
			}
			switch tc.method {
			case osimage.BootUEFIHTTP:
				if !strings.HasSuffix(boots[0].HTTPBootURI, "/uki.efi") || !strings.HasPrefix(boots[0].HTTPBootURI, r.artURL) {
					t.Errorf("HttpBootUri = %q", boots[0].HTTPBootURI)
				}
				r.checkFetched(t, boots[0].HTTPBootURI, img.Blobs[osimage.KindUKI])
			case osimage.BootPXE:
				r.mu.Lock()
				script := string(r.fetched[r.pxeURL])
				r.mu.Unlock()
				kernel := p.Steps[1].Artifacts[0].URL
				initrd := p.Steps[1].Artifacts[1].URL
				want := "#!ipxe\nkernel " + kernel + " initrd=initrd.img " + img.Cmdine + "\ninitrd " + initrd + "\nboot\n"
				if script != want {
					t.Errorf("iPXE script:\n%s\nwant:\n%s", script, want)
				}
				// The script's URLs serve the kernel and initrd bytes.
				r.firmwareGet(t, kernel, img.Blobs[osimage.KindKernel])
				r.firmwareGet(t, initrd, img.Blobs[osimage.KindInitrd])
			case osimage.BootVirtualMedia:
				if !snap.MediaInserted || !snap.MediaWriteProtected || !strings.HasSuffix(snap.MediaImage, "/image.iso") {
					t.Errorf("media = %+v", snap)
				}
				r.checkFetched(t, snap.MediaImage, img.Blobs[osimage.KindISO])
			case osimage.BootDisk:
				if len(r.fetched) != 0 {
					t.Errorf("disk boot fetched %v", r.fetched)
				}
			}
			if c, ok := st.Condition(boot.ConditionBooted); !ok || c.Status != boot.ConditionTrue {
				t.Errorf("Booted condition = %+v", c)
			}
		})
	}
}

func (r *rig) checkFetched(t *testing.T, u string, want []byte) {
	t.Helper()
	r.mu.Lock()
	got, ok := r.fetched[u]
	r.mu.Unlock()
	if !ok || !bytes.Equal(got, want) {
		t.Errorf("firmware fetched %d bytes from %s (ok=%t), want %d", len(got), u, ok, len(want))
	}
}

func (r *rig) firmwareGet(t *testing.T, u string, want []byte) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !bytes.Equal(got, want) {
		t.Errorf("GET %s: %d, %d bytes, want %d", u, resp.StatusCode, len(got), len(want))
	}
}

func TestNetworkBootOnceThenDisk(t *testing.T) {
	reg := newRegistry(t)
	img := pushImage(t, reg, "os/once", allKinds(), allMethods(), osimage.BootUEFIHTTP)
	for _, tc := range []struct {
		name string
		opts redfishemu.Options
	}{
		{"standard", redfishemu.Options{}},
		{"once-treated-as-continuous", redfishemu.Options{OnceAsContinuous: true}},
		{"no-continuous", redfishemu.Options{NoContinuous: true, OnceAsContinuous: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			r := newRig(t, img, tc.opts)
			p := r.plan("", boot.NetworkBootOnce)
			c := r.connect(ctx)
			defer c.Close()
			st := &boot.State{}
			if err := r.driver().Run(ctx, c, p, st); err != nil {
				t.Fatal(err)
			}
			if cond, _ := st.Condition(boot.ConditionNetworkBootedOnce); cond.Status != boot.ConditionTrue {
				t.Errorf("NetworkBootedOnce = %+v", cond)
			}
			// Reboots outside the driver, twice: both go to disk.
			for range 2 {
				if err := c.Reset(ctx, "ForceRestart"); err != nil {
					t.Fatal(err)
				}
			}
			// A re-run with the persisted state does not re-provision.
			b, _ := json.Marshal(st)
			var st2 boot.State
			_ = json.Unmarshal(b, &st2)
			if err := r.driver().Run(ctx, c, p, &st2); err != nil {
				t.Fatal(err)
			}
			boots := r.emu.Boots()
			if len(boots) != 3 || boots[0].Target != "UefiHttp" || boots[1].Target != "Hdd" || boots[2].Target != "Hdd" {
				t.Fatalf("boots = %+v, want UefiHttp, Hdd, Hdd", boots)
			}
		})
	}
}

func TestMismatchRefusedBeforeBMCCall(t *testing.T) {
	reg := newRegistry(t)
	img := pushImage(t, reg, "os/ukionly", []osimage.ArtifactKind{osimage.KindUKI, osimage.KindDisk},
		[]osimage.BootMethod{osimage.BootUEFIHTTP, osimage.BootDisk}, osimage.BootUEFIHTTP)
	r := newRig(t, img, redfishemu.Options{})
	_, err := boot.Resolve(readIdentity(t, img.Ref), boot.Request{Image: img.Ref.String(), Method: osimage.BootPXE, ArtifactBaseURL: r.artURL})
	if !errors.Is(err, boot.ErrPlan) || !strings.Contains(err.Error(), "image offers no kernel+initrd for pxe: it has disk, uki") {
		t.Fatalf("err = %v", err)
	}
	if n := r.emu.Requests(); n != 0 {
		t.Errorf("emulator saw %d requests, want 0", n)
	}
}

func TestCapabilityRefusals(t *testing.T) {
	reg := newRegistry(t)
	img := pushImage(t, reg, "os/caps", allKinds(), allMethods(), osimage.BootUEFIHTTP)
	for _, tc := range []struct {
		name   string
		method osimage.BootMethod
		opts   redfishemu.Options
		want   string
	}{
		{"no-uefi-http", osimage.BootUEFIHTTP, redfishemu.Options{NoUefiHttp: true}, "BMC offers no UefiHttp boot target (allows ["},
		{"no-virtual-media", osimage.BootVirtualMedia, redfishemu.Options{NoVirtualMedia: true}, "BMC has no CD-capable virtual media slot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			r := newRig(t, img, tc.opts)
			c := r.connect(ctx)
			defer c.Close()
			d := r.driver()
			// The capability is checked before any artifact is fetched and
			// verified (hundreds of MiB for an ISO).
			var published int
			d.Publisher = publisherFunc(func(context.Context, []boot.PublishedArtifact, []boot.Script) error { published++; return nil })
			err := d.Run(ctx, c, r.plan(tc.method, boot.NetworkBootOnce), &boot.State{})
			if !errors.Is(err, boot.ErrCapability) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if published != 0 {
				t.Errorf("artifacts published (fetched, verified) before the capability check")
			}
			if r.patchHit.Load() != 0 || len(r.emu.Boots()) != 0 {
				t.Errorf("BMC was changed: %d PATCHes, boots %v", r.patchHit.Load(), r.emu.Boots())
			}
		})
	}
}

func TestBootsSurviveInjectedFaults(t *testing.T) {
	reg := newRegistry(t)
	img := pushImage(t, reg, "os/faults", allKinds(), allMethods(), osimage.BootUEFIHTTP)
	for i, m := range allMethods() {
		t.Run(string(m), func(t *testing.T) {
			ctx := t.Context()
			r := newRig(t, img, redfishemu.Options{FaultRate: 0.2, Seed: uint64(i + 1), RequireIfMatch: true})
			c := r.connect(ctx)
			defer c.Close()
			p, st := r.plan(m, boot.NetworkBootAlways), &boot.State{}
			for range 5 {
				if err := r.driver().Run(ctx, c, p, st); err != nil {
					t.Fatal(err)
				}
			}
			if b := r.emu.Boots(); len(b) != 5 {
				t.Fatalf("boots = %v", b)
			}
			if r.emu.Faults() == 0 {
				t.Errorf("no faults injected in %d requests", r.emu.Requests())
			}
			t.Logf("%d faults in %d requests", r.emu.Faults(), r.emu.Requests())
		})
	}
}

// TestEvidenceBoundToAttempt: a machine's boot token is the same for
// every boot of one machine and image (a resumed plan keeps its URLs), so
// a GET of the boot file from an earlier attempt, or from anyone who saw
// the URL before this attempt's power action, must not pass for this
// attempt's boot: under NetworkBootAlways the second boot of a machine that
// fetches nothing fails for want of evidence, also after a GET of its URL
// between the attempts; the machine's own fetch counts again.
func TestEvidenceBoundToAttempt(t *testing.T) {
	reg := newRegistry(t)
	img := pushImage(t, reg, "os/attempts", allKinds(), allMethods(), osimage.BootUEFIHTTP)
	r := newRig(t, img, redfishemu.Options{})
	ctx := t.Context()
	c := r.connect(ctx)
	defer c.Close()
	p, st := r.plan(osimage.BootUEFIHTTP, boot.NetworkBootAlways), &boot.State{}
	d := r.driver()
	d.EvidenceTimeout = 300 * time.Millisecond
	if err := d.Run(ctx, c, p, st); err != nil {
		t.Fatalf("first boot: %v", err)
	}
	r.machineDown.Store(true)
	if err := d.Run(ctx, c, p, st); !errors.Is(err, boot.ErrTimeout) {
		t.Errorf("second boot, machine down: err = %v, want no evidence (the first boot's fetch counted)", err)
	}
	var bootFile string
	for _, s := range p.Steps {
		if s.Kind == boot.StepSetOverride {
			bootFile = s.Override.HTTPBootURI
		}
	}
	resp, err := http.Get(bootFile) // someone who saw the URL, between attempts
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", bootFile, resp.Status)
	}
	st.Done = 0 // the failed boot's state: start over
	if err := d.Run(ctx, c, p, st); !errors.Is(err, boot.ErrTimeout) {
		t.Errorf("third boot, machine down, URL fetched before the attempt: err = %v, want no evidence", err)
	}
	r.machineDown.Store(false)
	st.Done = 0
	if err := d.Run(ctx, c, p, st); err != nil {
		t.Errorf("fourth boot, machine up: %v", err)
	}
	if b := r.emu.Boots(); len(b) != 4 {
		t.Errorf("boots = %v, want 4", b)
	}
}

func TestBMCDiesMidBootThenResumes(t *testing.T) {
	reg := newRegistry(t)
	img := pushImage(t, reg, "os/dies", allKinds(), allMethods(), osimage.BootUEFIHTTP)
	r := newRig(t, img, redfishemu.Options{})
	ctx := t.Context()
	p := r.plan(osimage.BootUEFIHTTP, boot.NetworkBootOnce)
	c := r.connect(ctx)
	var saved []byte
	d := r.driver()
	d.Persist = func(s *boot.State) error {
		var err error
		saved, err = json.Marshal(s)
		if s.Done > 0 && p.Steps[s.Done-1].Kind == boot.StepSetOverride {
			r.bmcDead.Store(true) // the BMC dies right after the override
		}
		return err
	}
	err := d.Run(ctx, c, p, &boot.State{})
	c.Close()
	if err == nil || !strings.Contains(err.Error(), "power-on-or-restart") || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("err = %v, want a clear power step failure", err)
	}
	if len(r.emu.Boots()) != 0 {
		t.Fatalf("booted while dead: %v", r.emu.Boots())
	}

	r.bmcDead.Store(false)
	var st boot.State
	if err := json.Unmarshal(saved, &st); err != nil {
		t.Fatal(err)
	}
	if p.Steps[st.Done].Kind != boot.StepPower {
		t.Fatalf("saved state resumes at %s, want power", p.Steps[st.Done].Kind)
	}
	patches := r.patchHit.Load()
	c = r.connect(ctx)
	defer c.Close()
	if err := r.driver().Run(ctx, c, p, &st); err != nil {
		t.Fatal(err)
	}
	boots := r.emu.Boots()
	if len(boots) != 1 || boots[0].Target != "UefiHttp" {
		t.Fatalf("boots = %v", boots)
	}
	// Resume did not redo the override (override still in place), only
	// pinned disk afterwards.
	if got := r.patchHit.Load() - patches; got != 1 {
		t.Errorf("resume sent %d PATCHes, want 1 (pin disk)", got)
	}
}

func TestSessionLoggedOutOnClose(t *testing.T) {
	r := newRig(t, nil, redfishemu.Options{})
	c := r.connect(t.Context())
	if r.emu.Sessions() != 1 {
		t.Fatalf("sessions = %d", r.emu.Sessions())
	}
	c.Close()
	if r.emu.Sessions() != 0 {
		t.Fatalf("sessions after Close = %d", r.emu.Sessions())
	}
}

func TestAdvertiseDiffersFromListen(t *testing.T) {
	reg := newRegistry(t)
	img := pushImage(t, reg, "os/adv", allKinds(), allMethods(), osimage.BootUEFIHTTP)
	srv, err := artifacts.NewServer(artifacts.RegistrySource{Repo: img.Ref.Context()}, filepath.Join(t.TempDir(), "cache"), "http://boot.example:8080/prefix")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	go func() { _ = srv.ListenAndServe(ctx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	addr := <-addrc
	p, err := boot.Resolve(readIdentity(t, img.Ref), boot.Request{Image: img.Ref.String(), ArtifactBaseURL: srv.AdvertiseURL()})
	if err != nil {
		t.Fatal(err)
	}
	uki := p.Steps[1].Artifacts[0]
	if !strings.HasPrefix(uki.URL, "http://boot.example:8080/prefix/blobs/sha256:") {
		t.Fatalf("advertised URL = %s", uki.URL)
	}
	if err := srv.Publish(ctx, p.Steps[1].Artifacts, nil); err != nil {
		t.Fatal(err)
	}
	// A proxy at the advertised address strips /prefix; we hit the listener.
	resp, err := http.Get("http://" + addr.String() + strings.TrimPrefix(uki.URL, "http://boot.example:8080/prefix"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/efi" {
		t.Fatalf("GET: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// BenchmarkConcurrentBoots500 boots 500 emulated BMCs (one httptest server
// each) concurrently through one Driver: connect, plan run, logout.
func BenchmarkConcurrentBoots500(b *testing.B) {
	const n = 500
	reg := newRegistry(b)
	img := pushImage(b, reg, "os/bench", allKinds(), allMethods(), osimage.BootUEFIHTTP)
	r := newRig(b, img, redfishemu.Options{})
	r.plan(osimage.BootUEFIHTTP, boot.NetworkBootOnce) // publishes nothing; checks the image resolves
	id := readIdentity(b, img.Ref)
	req := boot.Request{Image: img.Ref.String(), Method: boot.MethodAuto, ArtifactBaseURL: r.artURL}
	d := &boot.Driver{Publisher: r.art}
	urls := make([]string, n)
	emus := make([]*redfishemu.Emulator, n)
	for i := range n {
		emus[i] = redfishemu.New(redfishemu.Options{})
		ts := httptest.NewServer(emus[i])
		b.Cleanup(ts.Close)
		urls[i] = ts.URL
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				ctx := context.Background()
				c, err := redfish.Connect(ctx, redfish.Config{Endpoint: urls[i], Credentials: redfish.Credentials{Username: "admin", Password: "password"},
					Retry: redfish.Retry{Base: 5 * time.Millisecond}})
				if err != nil {
					errs <- err
					return
				}
				defer c.Close()
				// Auth (session, else basic) and the capability-driven
				// method choice are part of every boot.
				caps, err := c.Capabilities(ctx)
				if err != nil {
					errs <- err
					return
				}
				p, err := boot.ResolveFor(id, req, &caps)
				if err != nil {
					errs <- err
					return
				}
				if err := d.Run(ctx, c, p, &boot.State{}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/500boots")
	for _, e := range emus {
		if len(e.Boots()) != b.N {
			b.Fatalf("emulator booted %d times, want %d", len(e.Boots()), b.N)
		}
	}
}

type publisherFunc func(context.Context, []boot.PublishedArtifact, []boot.Script) error

func (f publisherFunc) Publish(ctx context.Context, a []boot.PublishedArtifact, s []boot.Script) error {
	return f(ctx, a, s)
}
