package boot

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
)

// identity reads, through osimage.ReadIdentity, an image with one small
// layer per media type (titled like the builder's files) and anns.
func identity(t testing.TB, anns map[string]string, mts ...string) (*osimage.BootIdentity, error) {
	t.Helper()
	titles := map[string]string{osimage.MediaTypeUKI: "uki.efi", osimage.MediaTypeKernel: "vmlinuz",
		osimage.MediaTypeInitramfs: "initrd.img", osimage.MediaTypeISO: "image.iso", osimage.MediaTypeDisk: "disk.raw",
		osimage.MediaTypeInitramfsNoRoot: "initrd-noroot.img", osimage.MediaTypeSquashfs: "root.squashfs"}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	for i, mt := range mts {
		l := static.NewLayer(bytes.Repeat([]byte{byte('a' + i)}, 100+i), types.MediaType(mt))
		var err error
		img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.MediaType(mt),
			Annotations: map[string]string{osimage.AnnotationTitle: titles[mt]}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(anns) > 0 {
		img = mutate.Annotations(img, anns).(v1.Image)
	}
	return osimage.ReadIdentity(img)
}

const testImage = "registry.example/os/node@sha256:1234"

func fullIdentity(t *testing.T) *osimage.BootIdentity {
	t.Helper()
	id, err := identity(t, map[string]string{
		osimage.AnnotationBootMethods: "uefi-http,pxe,virtual-media,disk", osimage.AnnotationBootDefault: "uefi-http",
		osimage.AnnotationCmdline: "console=ttyS0",
	}, osimage.MediaTypeUKI, osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeISO, osimage.MediaTypeDisk,
		osimage.MediaTypeInitramfsNoRoot, osimage.MediaTypeSquashfs)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestResolve(t *testing.T) {
	id := fullIdentity(t)
	ukiOnly, err := identity(t, map[string]string{osimage.AnnotationBootMethods: "uefi-http,disk"},
		osimage.MediaTypeUKI, osimage.MediaTypeDisk)
	if err != nil {
		t.Fatal(err)
	}
	inferred, err := identity(t, nil, osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeUKI)
	if err != nil {
		t.Fatal(err)
	}
	// An image as boot-operator-era tools make it: no initrd without root.
	noNoRoot, err := identity(t, nil, osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeDisk, osimage.MediaTypeSquashfs)
	if err != nil {
		t.Fatal(err)
	}
	noDisk, err := identity(t, map[string]string{osimage.AnnotationInstallModes: "memory,disk"},
		osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeInitramfsNoRoot)
	if err != nil {
		t.Fatal(err)
	}
	memoryOnly, err := identity(t, map[string]string{osimage.AnnotationInstallModes: "memory"},
		osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeInitramfsNoRoot, osimage.MediaTypeDisk)
	if err != nil {
		t.Fatal(err)
	}
	diskInstall := Install{Mode: osimage.InstallDisk, Target: "serial:osb-disk0"}
	tests := []struct {
		name      string
		id        *osimage.BootIdentity
		req       Request
		wantSteps string
		wantErr   string
	}{
		{"default uefi-http once", id, Request{ArtifactBaseURL: "http://art:8080"},
			"check-capability publish-artifacts set-override power-on-or-restart wait-evidence pin-disk", ""},
		{"pxe always", id, Request{Method: "pxe", Policy: NetworkBootAlways, ArtifactBaseURL: "http://art:8080"},
			"check-capability publish-artifacts set-override power-on-or-restart wait-evidence", ""},
		{"virtual media", id, Request{Method: "virtual-media", ArtifactBaseURL: "http://art:8080"},
			"check-capability publish-artifacts eject-media insert-media wait-media-inserted set-override power-on-or-restart wait-evidence pin-disk", ""},
		{"disk needs no artifact server", id, Request{Method: "disk"},
			"check-capability set-override power-on-or-restart wait-evidence", ""},
		{"policy none", id, Request{Policy: None}, "power-on-or-restart wait-evidence", ""},
		{"mismatch", ukiOnly, Request{Method: "pxe", ArtifactBaseURL: "http://art:8080"}, "",
			"image offers no kernel+initrd for pxe: it has disk, uki"},
		{"disk not declared", inferred, Request{Method: "disk"}, "", "does not declare disk boot"},
		{"default inferred from layers", inferred, Request{ArtifactBaseURL: "http://art:8080"},
			"check-capability publish-artifacts set-override power-on-or-restart wait-evidence pin-disk", ""},
		{"unknown method", id, Request{Method: "floppy"}, "", "unknown boot method"},
		{"unknown policy", id, Request{Policy: "Sometimes"}, "", "unknown policy"},
		{"no artifact server", id, Request{}, "", "needs an artifact server URL"},
		{"bad artifact server", id, Request{ArtifactBaseURL: "ftp://x"}, "", "not an http(s) URL"},
		{"install disk defaults to pxe", id, Request{Install: diskInstall, ArtifactBaseURL: "http://art:8080"},
			"check-capability publish-artifacts set-override power-on-or-restart wait-evidence pin-disk", ""},
		{"install disk always", id, Request{Install: diskInstall, Method: "pxe", Policy: NetworkBootAlways, ArtifactBaseURL: "http://art:8080"},
			"check-capability publish-artifacts set-override power-on-or-restart wait-evidence", ""},
		{"root by url", id, Request{Install: Install{RootURL: true}, ArtifactBaseURL: "http://art:8080"},
			"check-capability publish-artifacts set-override power-on-or-restart wait-evidence pin-disk", ""},
		{"explicit memory is the default", id, Request{Install: Install{Mode: osimage.InstallMemory}, Method: "pxe", ArtifactBaseURL: "http://art:8080"},
			"check-capability publish-artifacts set-override power-on-or-restart wait-evidence pin-disk", ""},
		{"install over uefi-http", id, Request{Install: diskInstall, Method: "uefi-http", ArtifactBaseURL: "http://art:8080"}, "",
			"boots via pxe only (got method uefi-http): the UKI's command line is sealed"},
		{"install over virtual media", id, Request{Install: diskInstall, Method: "virtual-media", ArtifactBaseURL: "http://art:8080"}, "",
			"the ISO's command line is fixed"},
		{"install over disk", id, Request{Install: diskInstall, Method: "disk"}, "", "boots via pxe only"},
		{"install without target", id, Request{Install: Install{Mode: osimage.InstallDisk}, ArtifactBaseURL: "http://art:8080"}, "",
			"needs a target disk selector"},
		{"install target with space", id, Request{Install: Install{Mode: osimage.InstallDisk, Target: "path:/dev/vda osb.install.wipe=1"}, ArtifactBaseURL: "http://art:8080"}, "",
			"must be one kernel command line word"},
		{"install without initrd-noroot", noNoRoot, Request{Install: diskInstall, ArtifactBaseURL: "http://art:8080"}, "",
			"needs kernel+initrd-noroot+disk in the image, missing initrd-noroot: it has disk, initrd, kernel, rootfs"},
		{"install without disk image", noDisk, Request{Install: diskInstall, ArtifactBaseURL: "http://art:8080"}, "",
			"missing disk: it has initrd, initrd-noroot, kernel"},
		{"root url without root image", noDisk, Request{Install: Install{RootURL: true}, ArtifactBaseURL: "http://art:8080"}, "",
			"missing rootfs"},
		{"image without install mode disk", memoryOnly, Request{Install: diskInstall, ArtifactBaseURL: "http://art:8080"}, "",
			"does not offer install mode disk (offers [memory])"},
		{"install under policy none", id, Request{Install: diskInstall, Policy: None}, "", "policy None sets no boot override"},
		{"install without artifact server", id, Request{Install: diskInstall}, "", "needs an artifact server URL"},
		{"target in memory mode", id, Request{Install: Install{Target: "path:/dev/vda"}, ArtifactBaseURL: "http://art:8080"}, "",
			"apply to install mode disk only"},
		{"root url in disk mode", id, Request{Install: Install{Mode: osimage.InstallDisk, Target: "serial:x", RootURL: true}, ArtifactBaseURL: "http://art:8080"}, "",
			"root by URL applies to install mode memory only"},
		{"unknown install mode", id, Request{Install: Install{Mode: "tape"}}, "", "unknown install mode"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Image = testImage
			p, err := Resolve(tc.id, tc.req)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrPlan %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, s := range p.Steps {
				kinds = append(kinds, string(s.Kind))
			}
			if got := strings.Join(kinds, " "); got != tc.wantSteps {
				t.Errorf("steps = %s\nwant    %s", got, tc.wantSteps)
			}
		})
	}
}

// TestPlanGolden pins the dry-run text and JSON of every method.
func TestPlanGolden(t *testing.T) {
	id := fullIdentity(t)
	for _, m := range []osimage.BootMethod{osimage.BootUEFIHTTP, osimage.BootPXE, osimage.BootVirtualMedia, osimage.BootDisk} {
		t.Run(string(m), func(t *testing.T) {
			p, err := Resolve(id, Request{Image: testImage, Method: m, ArtifactBaseURL: "http://10.0.0.5:8080"})
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := p.WriteText(&got); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "plan-"+string(m)+".txt")
			testutil.Golden(t, golden, got.Bytes())
		})
	}
}

// TestPlanGoldenInstall pins the plans of the install modes: the iPXE
// script's command line is the contract with the init (docs/cmdline.md).
func TestPlanGoldenInstall(t *testing.T) {
	id := fullIdentity(t)
	for name, in := range map[string]Install{
		"install-disk":    {Mode: osimage.InstallDisk, Target: "by-id:virtio-osb-disk0", Wipe: true},
		"memory-root-url": {RootURL: true},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := Resolve(id, Request{Image: testImage, Install: in, ArtifactBaseURL: "http://10.0.0.5:8080"})
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := p.WriteText(&got); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "plan-pxe-"+name+".txt")
			testutil.Golden(t, golden, got.Bytes())
		})
	}
}

// TestInstallKeepsPlainPlanDigest: a default Install leaves the plan (and
// so the digest saved states carry) as it was before install modes existed.
func TestInstallKeepsPlainPlanDigest(t *testing.T) {
	id := fullIdentity(t)
	a, err := Resolve(id, Request{Method: "pxe", ArtifactBaseURL: "http://a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Resolve(id, Request{Method: "pxe", ArtifactBaseURL: "http://a", Install: Install{Mode: osimage.InstallMemory}})
	if err != nil {
		t.Fatal(err)
	}
	if a.Digest() != b.Digest() || a.Install != nil {
		t.Errorf("explicit memory mode changed the plan: %s vs %s", a.Digest(), b.Digest())
	}
}

// FuzzResolve feeds arbitrary identity annotations and requests: whatever
// osimage reads must resolve or fail with ErrPlan, never panic.
func FuzzResolve(f *testing.F) {
	f.Add("uefi-http,pxe", "pxe", "pxe", "http://a", osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, "", "")
	f.Add("", "", "", "http://a", osimage.MediaTypeUKI, osimage.MediaTypeDisk, "", "")
	f.Add(",,", "disk", "floppy", "ftp://x", "x", "", "tape", "")
	f.Add("", "", "", "http://a", osimage.MediaTypeInitramfsNoRoot, osimage.MediaTypeDisk, "disk", "serial:x")
	f.Fuzz(func(t *testing.T, methods, def, method, base, mt1, mt2, mode, target string) {
		anns := map[string]string{}
		if methods != "" {
			anns[osimage.AnnotationBootMethods] = methods
		}
		if def != "" {
			anns[osimage.AnnotationBootDefault] = def
		}
		id, err := identity(t, anns, mt1, mt2)
		if err != nil {
			return
		}
		p, err := Resolve(id, Request{Method: osimage.BootMethod(method), ArtifactBaseURL: base,
			Install: Install{Mode: osimage.InstallMode(mode), Target: target}})
		if err != nil {
			if !errors.Is(err, ErrPlan) {
				t.Fatalf("Resolve: %v", err)
			}
			return
		}
		if len(p.Steps) == 0 {
			t.Fatal("empty plan")
		}
		if p.Install != nil && (p.Method != osimage.BootPXE || strings.ContainsAny(p.Install.Target, " \t\n")) {
			t.Fatalf("install plan %+v boots via %s", p.Install, p.Method)
		}
	})
}

func TestStateRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	st, err := LoadState(p)
	if err != nil || st.Done != 0 {
		t.Fatalf("missing file: %v %+v", err, st)
	}
	st.PlanDigest, st.Done = (&Plan{}).Digest(), 3
	st.SetCondition(Condition{Type: ConditionNetworkBootedOnce, Status: ConditionTrue, Reason: "x"}, fixedTime)
	st.SetCondition(Condition{Type: ConditionNetworkBootedOnce, Status: ConditionTrue, Reason: "y"}, fixedTime.Add(1))
	if err := SaveState(p, st); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(p)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := got.Condition(ConditionNetworkBootedOnce)
	if got.Done != 3 || c.Reason != "y" || !c.LastTransitionTime.Equal(fixedTime) {
		t.Errorf("got %+v", got)
	}
}

var fixedTime = mustTime("2026-01-02T03:04:05Z")

func mustTime(s string) (t time.Time) {
	t, _ = time.Parse(time.RFC3339, s)
	return t
}

// TestPlanIPv6ArtifactServer: an artifact server at an IPv6 literal gives
// bracketed URLs everywhere, in the iPXE script's kernel and initrd lines
// and in the URL the init fetches (osb.root=); without brackets the error
// says how to write it.
func TestPlanIPv6ArtifactServer(t *testing.T) {
	id := fullIdentity(t)
	p, err := Resolve(id, Request{Image: testImage, Install: Install{RootURL: true}, ArtifactBaseURL: "http://[fd00:db8::5]:8080"})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := p.WriteText(&got); err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "plan-pxe-memory-root-url-ipv6.txt"), got.Bytes())
	for _, w := range []string{"\n        kernel http://[fd00:db8::5]:8080/blobs/", " osb.root=http://[fd00:db8::5]:8080/blobs/", "\n        initrd http://[fd00:db8::5]:8080/blobs/"} {
		if !strings.Contains(got.String(), w) {
			t.Errorf("plan lacks %q:\n%s", w, got.String())
		}
	}
	for _, bad := range []string{"http://fd00:db8::5:8080", "http://[fe80::1%eth0]:8080"} {
		_, err := Resolve(id, Request{Image: testImage, Method: "pxe", ArtifactBaseURL: bad})
		if err == nil || !strings.Contains(err.Error(), "IPv6 literals go in brackets") {
			t.Errorf("%s: error %v, want the bracket hint", bad, err)
		}
	}
}
