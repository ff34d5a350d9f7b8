package e2e

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/boot/artifacts"
	"github.com/ironcore-dev/os-builder/boot/cli"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/redfishemu"
	"github.com/ironcore-dev/os-builder/redfishemu/qemutier"
)

// The vendor matrix: every method x every personality x every policy,
// through the serverboot CLI against the emulator (protocol tier). Each
// cell is either a correct boot or a refusal naming the missing capability;
// expect derives which from the personality's knobs, and the table in
// docs/boot-driver.md is generated from expect (checked here, -update
// rewrites it), so the documentation cannot drift from the test.

// matrixMethods are the --method values, auto last.
var matrixMethods = []string{"uefi-http", "pxe", "virtual-media", "disk", "auto"}

var matrixPolicies = []boot.Policy{boot.NetworkBootOnce, boot.NetworkBootAlways, boot.None}

// matrixImageOrder is the fake image's methods in its order of preference
// (its default first), which auto walks.
var matrixImageOrder = []osimage.BootMethod{osimage.BootUEFIHTTP, osimage.BootPXE, osimage.BootVirtualMedia, osimage.BootDisk}

// matrixArchs are the builds of the matrix image: one index, a manifest
// per architecture, each with blobs of its own.
var matrixArchs = []string{"amd64", "arm64"}

// outcome is what a cell must show.
type outcome struct {
	// refusal, when set, is what the CLI's error must name (exit 3).
	refusal string
	// arch is the image build that boots: the server's architecture
	// (empty where the BMC reports none).
	arch string
	// set is the InstructionSet the personality's CPUs report.
	set string
	// method is the method that boots (auto resolved).
	method osimage.BootMethod
	// target is the boot target the emulated system boots ("Hdd" without
	// override).
	target string
	// fetches: the firmware fetched its boot file from the artifact server.
	fetches bool
	// media: the ISO is inserted when the system boots.
	media bool
	// after is the override (Enabled Target) the BMC holds after the run.
	after string
}

// expect is the matrix's spec: the behaviour for a personality.
func expect(method string, p redfishemu.Personality, policy boot.Policy) outcome {
	var o redfishemu.Options
	p.Apply(&o)
	cd := o.CdBootTarget()
	// The architecture comes first: without it there is no build to plan.
	set := cmp.Or(o.InstructionSet, "x86-64")
	if o.NoInstructionSet {
		return outcome{refusal: "the server's architecture is unknown (the BMC reports no InstructionSet for the system's CPUs) and image"}
	}
	arch, err := boot.ArchitectureOf(set)
	if err != nil {
		panic(err) // a personality the matrix does not know
	}
	allowed := func(m osimage.BootMethod) bool {
		switch m {
		case osimage.BootUEFIHTTP:
			return !o.NoUefiHttp
		case osimage.BootVirtualMedia:
			return !o.NoVirtualMedia
		}
		return true
	}
	m := osimage.BootMethod(method)
	if method == "auto" {
		for _, c := range matrixImageOrder {
			if allowed(c) {
				m = c
				break
			}
		}
	}
	// The capability check comes first, whatever the policy: an explicit
	// method the BMC cannot do is refused, never replaced.
	if !allowed(m) {
		return outcome{arch: arch, set: set, refusal: map[osimage.BootMethod]string{osimage.BootUEFIHTTP: "UefiHttp", osimage.BootVirtualMedia: "virtual media"}[m]}
	}
	if policy == boot.None {
		// No override, no media: a plain power-on.
		return outcome{arch: arch, set: set, method: m, target: "Hdd", after: "Disabled None"}
	}
	out := outcome{arch: arch, set: set, method: m}
	switch m {
	case osimage.BootUEFIHTTP:
		out.target, out.fetches = "UefiHttp", true
	case osimage.BootPXE:
		out.target, out.fetches = "Pxe", true
	case osimage.BootVirtualMedia:
		out.target, out.fetches, out.media = cd, true, true
	case osimage.BootDisk:
		out.target = "Hdd"
	}
	switch {
	case policy == boot.NetworkBootOnce && m != osimage.BootDisk && o.NoContinuous:
		out.after = "Disabled None" // pin-disk clears what it cannot pin
	case policy == boot.NetworkBootOnce && m != osimage.BootDisk:
		out.after = "Continuous Hdd"
	case o.OnceAsContinuous:
		out.after = "Once " + out.target // the firmware bug: never cleared
	default:
		out.after = "Disabled None"
	}
	return out
}

func (o outcome) String() string {
	switch {
	case o.arch == "":
		return "refused: architecture unknown"
	case o.refusal != "":
		return "refused: no " + o.refusal
	}
	return "boots " + o.target
}

// matrixImage pushes a multi-architecture image offering every method, one
// build per matrixArchs with blobs of its own, as an OCI index to a real
// registry (docker-registry), and returns its reference and each build's
// boot identity.
func matrixImage(t *testing.T) (string, map[string]*osimage.BootIdentity) {
	t.Helper()
	var order []string
	for _, m := range matrixImageOrder {
		order = append(order, string(m))
	}
	ids := map[string]*osimage.BootIdentity{}
	var adds []mutate.IndexAddendum
	for _, arch := range matrixArchs {
		img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		for _, l := range []struct{ mt, title string }{
			{osimage.MediaTypeUKI, "uki.efi"}, {osimage.MediaTypeKernel, "vmlinuz"}, {osimage.MediaTypeInitramfs, "initrd.img"},
			{osimage.MediaTypeISO, "image.iso"}, {osimage.MediaTypeDisk, "disk.raw"},
		} {
			var err error
			img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer([]byte(arch+" "+l.title+" bytes"), types.MediaType(l.mt)),
				MediaType: types.MediaType(l.mt), Annotations: map[string]string{osimage.AnnotationTitle: l.title}})
			if err != nil {
				t.Fatal(err)
			}
		}
		img = mutate.Annotations(img, map[string]string{osimage.AnnotationBootMethods: strings.Join(order, ","),
			osimage.AnnotationBootDefault: order[0], osimage.AnnotationCmdline: "console=ttyS0", osimage.AnnotationArchitecture: arch}).(v1.Image)
		id, err := osimage.ReadIdentity(img)
		if err != nil {
			t.Fatal(err)
		}
		ids[arch] = id
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	ref, err := name.ParseReference(testutil.NewRegistry(t)+"/os/matrix:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	return ref.String(), ids
}

// firmware is the emulated system's firmware at the protocol tier: on each
// boot it fetches what the target boots, as a machine would, and records
// the answers.
type firmware struct {
	pxeScript string // what DHCP hands an iPXE client
	mu        sync.Mutex
	fetched   []string // "TARGET URL STATUS"
}

func (f *firmware) onBoot(ev redfishemu.BootEvent) {
	var u string
	switch ev.Target {
	case "UefiHttp":
		u = ev.HTTPBootURI
	case "Pxe":
		u = f.pxeScript
	case "Cd", "UsbCd":
		u = ev.MediaImage
	}
	if u == "" {
		return
	}
	// Firmware retries a boot file it cannot reach yet (serverboot starts
	// its artifact server concurrently with the BMC calls).
	status := 0
	for range 40 {
		resp, err := http.Get(u)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.mu.Lock()
	f.fetched = append(f.fetched, fmt.Sprintf("%s %s %d", ev.Target, u, status))
	f.mu.Unlock()
}

// TestVendorMatrix runs every cell through `serverboot boot`.
func TestVendorMatrix(t *testing.T) {
	ref, ids := matrixImage(t)
	creds := filepath.Join(t.TempDir(), "creds.json")
	if err := os.WriteFile(creds, []byte(`{"username": "admin", "password": "password"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range redfishemu.Personalities {
		for _, method := range matrixMethods {
			for _, policy := range matrixPolicies {
				want := expect(method, p, policy)
				t.Run(fmt.Sprintf("%s/%s/%s", p.Name, method, policy), func(t *testing.T) {
					t.Parallel()
					runCell(t, ref, ids, creds, p, method, policy, want)
				})
			}
		}
	}
}

func runCell(t *testing.T, ref string, ids map[string]*osimage.BootIdentity, creds string, p redfishemu.Personality, method string, policy boot.Policy, want outcome) {
	id := ids[cmp.Or(want.arch, matrixArchs[0])]
	var (
		fw             *firmware
		emu            *redfishemu.Emulator
		code           int
		stdout, stderr bytes.Buffer
	)
	// The artifact server's port is chosen before serverboot binds it (the
	// firmware's PXE script names it); another parallel cell may take it
	// in between: then the cell runs again on another port.
	for attempt := 1; ; attempt++ {
		listen := testutil.FreeAddr(t)
		fw = &firmware{}
		var o redfishemu.Options
		p.Apply(&o)
		o.OnBoot = fw.onBoot
		emu = redfishemu.New(o)
		bmc := httptest.NewServer(emu)
		cacheDir := filepath.Join(t.TempDir(), "cache")
		fw.pxeScript = serverbootScriptURL(t, id, ref, "http://"+listen, cacheDir, bmc.URL)

		args := []string{"boot", "--bmc", bmc.URL, "--image", ref, "--insecure-registry", "--method", method, "--policy", string(policy),
			"--artifact-listen", listen, "--cache-dir", cacheDir, "--credentials-file", creds,
			"--serve-after-boot", "0s", "--evidence-timeout", "20s", "--timeout", "45s"}
		stdout.Reset()
		stderr.Reset()
		code = cli.Run(context.Background(), args, &stdout, &stderr)
		bmc.Close()
		if attempt < 3 && strings.Contains(stderr.String(), "address already in use") {
			t.Logf("attempt %d: %s is taken; again", attempt, listen)
			continue
		}
		break
	}
	s := emu.State()
	detail := fmt.Sprintf("exit %d\nstderr: %s\nboots %+v, resets %d, state %+v, fetched %v", code, stderr.String(), emu.Boots(), emu.Resets(), s, fw.fetched)

	if want.refusal != "" || want.arch == "" {
		if code != cli.ExitMismatch || !strings.Contains(stderr.String(), want.refusal) {
			t.Fatalf("want a refusal (exit 3) naming %q\n%s", want.refusal, detail)
		}
		if emu.Resets() != 0 || len(emu.Boots()) != 0 {
			t.Errorf("a refused plan powered the server\n%s", detail)
		}
		return
	}
	if code != cli.ExitOK {
		t.Fatalf("want a boot (%s)\n%s", want, detail)
	}
	boots := emu.Boots()
	if emu.Resets() != 1 || len(boots) != 1 {
		t.Fatalf("want exactly one reset and one boot\n%s", detail)
	}
	if boots[0].Target != want.target {
		t.Errorf("booted %s, want %s\n%s", boots[0].Target, want.target, detail)
	}
	if got := s.OverrideEnabled + " " + s.OverrideTarget; got != want.after {
		t.Errorf("override after the run %q, want %q\n%s", got, want.after, detail)
	}
	if want.media != (boots[0].MediaImage != "") || (want.media && !strings.HasSuffix(boots[0].MediaImage, "/image.iso")) {
		t.Errorf("media at boot %q, want inserted=%t (image.iso)\n%s", boots[0].MediaImage, want.media, detail)
	}
	fw.mu.Lock()
	fetched := fw.fetched
	fw.mu.Unlock()
	if want.fetches && (len(fetched) != 1 || !strings.HasSuffix(fetched[0], " 200")) {
		t.Errorf("want the boot file fetched once with 200\n%s", detail)
	}
	if !want.fetches && len(fetched) != 0 {
		t.Errorf("want no artifact fetched\n%s", detail)
	}
	// The server's architecture picked the build: the log says so, and
	// what the firmware fetched is that build's blob (pxe: the script URL
	// is derived from the build's plan, so another build's is a 404).
	if said := "arch " + want.arch + " (the BMC's Processors report " + want.set + ")"; !strings.Contains(stderr.String(), said) {
		t.Errorf("stderr does not say %q\n%s", said, detail)
	}
	if kind, ok := map[osimage.BootMethod]osimage.ArtifactKind{osimage.BootUEFIHTTP: osimage.KindUKI, osimage.BootVirtualMedia: osimage.KindISO}[want.method]; ok && len(fetched) == 1 {
		if blob, _ := id.Artifact(kind); !strings.Contains(fetched[0], "/blobs/"+blob.Digest.String()+"/") {
			t.Errorf("fetched %s, want the %s build's %s %s\n%s", fetched[0], want.arch, kind, blob.Digest, detail)
		}
	}
	if said := regexp.MustCompile(`method:? ` + string(want.method) + ` \(`); method == "auto" && !said.MatchString(stdout.String()+stderr.String()) {
		t.Errorf("auto: the output does not say `method: %s (why)`\n%s\nstdout: %s", want.method, detail, stdout.String())
	}
}

// serverbootScriptURL is the iPXE script URL of the pxe plan serverboot
// makes, which a DHCP server would hand out: it is derived from the plan's
// content, and the plan's base URL carries the boot token serverboot makes
// from the BMC URL and the image with the key in its cache directory.
func serverbootScriptURL(t *testing.T, id *osimage.BootIdentity, image, advertise, cacheDir, bmcURL string) string {
	t.Helper()
	ref, err := name.ParseReference(image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	base, err := artifacts.BootURL(advertise, cacheDir, bmcURL+"\x00"+ref.String())
	if err != nil {
		t.Fatal(err)
	}
	p, err := boot.Resolve(id, boot.Request{Image: ref.String(), Method: osimage.BootPXE, ArtifactBaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	return ipxeScriptURL(t, p)
}

// ipxeScriptURL is the plan's iPXE script URL.
func ipxeScriptURL(t *testing.T, p *boot.Plan) string {
	t.Helper()
	for _, s := range p.Steps {
		if len(s.Scripts) > 0 {
			return s.Scripts[0].URL
		}
	}
	t.Fatal("pxe plan without iPXE script")
	return ""
}

// matrixMarkdown is the docs table, from expect.
func matrixMarkdown() string {
	var b strings.Builder
	b.WriteString("| personality | differs by | arch | " + strings.Join(matrixMethods, " | ") + " | after NetworkBootOnce |\n")
	b.WriteString("|---|---|---" + strings.Repeat("|---", len(matrixMethods)+1) + "|\n")
	for _, p := range redfishemu.Personalities {
		arch := "none reported"
		if o := expect("auto", p, boot.NetworkBootOnce); o.arch != "" {
			arch = o.arch + " (" + o.set + ")"
		}
		row := []string{"`" + p.Name + "`", p.Quirks(), arch}
		for _, m := range matrixMethods {
			o := expect(m, p, boot.NetworkBootOnce)
			cell := o.String()
			if m == "auto" && o.refusal == "" && o.arch != "" {
				cell = string(o.method) + ": " + cell
			}
			row = append(row, cell)
		}
		row = append(row, cmp.Or(expect("pxe", p, boot.NetworkBootOnce).after, "untouched"))
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

const (
	matrixBegin = "<!-- vendor matrix: generated by boot/e2e TestVendorMatrixDoc; go test ./boot/e2e -run TestVendorMatrixDoc -update -->\n"
	matrixEnd   = "<!-- end of vendor matrix -->\n"
)

// TestVendorMatrixDoc: docs/boot-driver.md carries the table expect gives.
func TestVendorMatrixDoc(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "boot-driver.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(doc, []byte(matrixBegin)), bytes.Index(doc, []byte(matrixEnd))
	if i < 0 || j < i {
		t.Fatalf("%s: no vendor matrix between %q and %q", path, strings.TrimSpace(matrixBegin), strings.TrimSpace(matrixEnd))
	}
	got, want := string(doc[i+len(matrixBegin):j]), matrixMarkdown()
	if got == want {
		return
	}
	if testutil.Updating() {
		out := append(append(append([]byte{}, doc[:i+len(matrixBegin)]...), want...), doc[j:]...)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: vendor matrix is stale (run with -update):\n got:\n%s\nwant:\n%s", path, got, want)
}

// TestQEMUVendorMatrix boots the test image through `serverboot boot` and
// the QEMU tier on a representative subset of the matrix: one cell per
// network method, each on another personality, asserted on the serial
// console. The boots run one after the other (TCG). What a cell adds to
// TestVendorMatrix's is serverboot's own artifact server
// (--artifact-listen/--artifact-advertise) serving real firmware, so each
// stops once that is proven: the target booted, the artifact reached the
// guest and our init started from it (multi-user of the same bytes over
// the same firmware paths: TestQEMUBoots/ipxe, builder TestBootUKIOverHTTP
// and TestBootISO). A disk cell fetches nothing from that server: its BMC
// part is TestVendorMatrix's (every personality, disk, every policy), its
// disk boot TestQEMUBoots' disk cases.
func TestQEMUVendorMatrix(t *testing.T) {
	e := newEnv(t)
	creds := filepath.Join(t.TempDir(), "creds.json")
	if err := os.WriteFile(creds, []byte(`{"username": "admin", "password": "password"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cells := []struct {
		personality, method string
		want                []string // on the console: all of them
	}{
		{"lenovo-xcc", "uefi-http", []string{"osb-init: starting: mode=memory root=initrd"}},
		// auto on a BMC without UefiHttp: the image's next method, pxe.
		{"hpe-ilo4", "auto", []string{"iPXE", "osb-init: starting: mode=memory root=initrd"}},
		{"dmtf-system-media", "virtual-media", []string{"osb-init: starting: mode=memory root=initrd"}},
	}
	for _, c := range cells {
		t.Run(c.personality+"/"+c.method, func(t *testing.T) {
			p, err := redfishemu.LookupPersonality(c.personality)
			if err != nil {
				t.Fatal(err)
			}
			want := expect(c.method, p, boot.NetworkBootOnce)
			var o redfishemu.Options
			p.Apply(&o)
			b := newBMC(t, o, "") // waits for a guest slot
			start := time.Now()
			port := strings.TrimPrefix(testutil.FreeAddr(t), "127.0.0.1:")
			advertise := "http://" + qemutier.SlirpHost + ":" + port
			cacheDir := filepath.Join(t.TempDir(), "cache")
			b.machine.SetPXEBootFile(serverbootScriptURL(t, e.identity, e.ref.String(), advertise, cacheDir, b.url))
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
			defer cancel()
			var stdout, stderr testutil.SyncBuffer
			code := -1
			done := make(chan struct{})
			go func() {
				defer close(done)
				code = cli.Run(ctx, []string{"boot", "--bmc", b.url, "--image", e.ref.String(), "--insecure-registry",
					"--method", c.method, "--artifact-listen", "127.0.0.1:" + port, "--artifact-advertise", advertise,
					"--cache-dir", cacheDir, "--credentials-file", creds, "--serve-after-boot", "10m"}, &stdout, &stderr)
				if code != cli.ExitOK {
					cancel() // ends the console wait: the boot failed
				}
			}()
			t.Cleanup(func() {
				cancel()
				<-done
				if t.Failed() {
					t.Logf("serverboot exit %d\nstderr: %s", code, stderr.String())
				}
			})
			// The boot is proven on the console; the CLI keeps serving
			// the kernel and initrd meanwhile and is stopped afterwards.
			expectConsole(t, ctx, b.machine, 1, initStarted, c.want...)
			if boots := b.emu.Boots(); len(boots) != 1 || boots[0].Target != want.target || b.emu.Resets() != 1 {
				t.Errorf("emulator boots %+v, resets %d; want one %s boot\nstderr: %s", boots, b.emu.Resets(), want.target, stderr.String())
			}
			t.Logf("%s/%s: %s in %s (%d BMC requests)", c.personality, c.method, initStarted, time.Since(start).Round(time.Second), b.emu.Requests())
		})
	}
}
