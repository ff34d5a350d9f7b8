package boot

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/osimage"
)

var update = flag.Bool("update", false, "rewrite golden files")

func manifest(anns map[string]string, mts ...string) *v1.Manifest {
	m := &v1.Manifest{Annotations: anns}
	for i, mt := range mts {
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: types.MediaType(mt), Size: int64(100 + i),
			Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(string(rune('a'+i)), 64)}})
	}
	return m
}

func TestIdentityFromManifest(t *testing.T) {
	tests := []struct {
		name        string
		anns        map[string]string
		mts         []string
		wantMethods string
		wantDefault osimage.BootMethod
		wantErr     string
	}{
		{"inferred from layers", nil, []string{osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeUKI},
			"uefi-http,pxe", osimage.BootUEFIHTTP, ""},
		{"annotated default", map[string]string{osimage.AnnotationBootMethods: "pxe, uefi-http", osimage.AnnotationBootDefault: "pxe"},
			[]string{osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeUKI}, "pxe,uefi-http", osimage.BootPXE, ""},
		{"iso only", nil, []string{osimage.MediaTypeISO}, "virtual-media", osimage.BootVirtualMedia, ""},
		{"unknown method", map[string]string{osimage.AnnotationBootMethods: "floppy"}, nil, "", "", "unknown boot method"},
		{"default not offered", map[string]string{osimage.AnnotationBootMethods: "pxe", osimage.AnnotationBootDefault: "disk"},
			[]string{osimage.MediaTypeKernel, osimage.MediaTypeInitramfs}, "", "", "not among"},
		{"nothing bootable", nil, []string{osimage.MediaTypeManifestJSON}, "", "", "no boot method"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id, err := IdentityFromManifest(manifest(tc.anns, tc.mts...))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ms []string
			for _, m := range id.Methods {
				ms = append(ms, string(m))
			}
			if got := strings.Join(ms, ","); got != tc.wantMethods || id.Default != tc.wantDefault {
				t.Errorf("methods %s default %s, want %s %s", got, id.Default, tc.wantMethods, tc.wantDefault)
			}
		})
	}
}

func fullIdentity(t *testing.T) *Identity {
	t.Helper()
	id, err := IdentityFromManifest(manifest(map[string]string{
		osimage.AnnotationBootMethods: "uefi-http,pxe,virtual-media,disk", osimage.AnnotationBootDefault: "uefi-http",
		osimage.AnnotationCmdline: "console=ttyS0",
	}, osimage.MediaTypeUKI, osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeISO, osimage.MediaTypeDisk))
	if err != nil {
		t.Fatal(err)
	}
	id.Reference = "registry.example/os/node@sha256:1234"
	return id
}

func TestResolve(t *testing.T) {
	id := fullIdentity(t)
	ukiOnly, _ := IdentityFromManifest(manifest(map[string]string{osimage.AnnotationBootMethods: "uefi-http,disk"},
		osimage.MediaTypeUKI, osimage.MediaTypeDisk))
	tests := []struct {
		name      string
		id        *Identity
		req       Request
		wantSteps string
		wantErr   string
	}{
		{"default uefi-http once", id, Request{ArtifactBaseURL: "http://art:8080"},
			"publish-artifacts check-capability set-override power-on-or-restart wait-evidence pin-disk", ""},
		{"pxe always", id, Request{Method: "pxe", Policy: NetworkBootAlways, ArtifactBaseURL: "http://art:8080"},
			"publish-artifacts check-capability set-override power-on-or-restart wait-evidence", ""},
		{"virtual media", id, Request{Method: "virtual-media", ArtifactBaseURL: "http://art:8080"},
			"publish-artifacts check-capability eject-media insert-media wait-media-inserted set-override power-on-or-restart wait-evidence pin-disk", ""},
		{"disk needs no artifact server", id, Request{Method: "disk"},
			"check-capability set-override power-on-or-restart wait-evidence", ""},
		{"policy none", id, Request{Policy: None}, "power-on-or-restart wait-evidence", ""},
		{"mismatch", ukiOnly, Request{Method: "pxe", ArtifactBaseURL: "http://art:8080"}, "",
			"image offers no kernel+initrd for pxe: it has uki, disk"},
		{"unknown method", id, Request{Method: "floppy"}, "", "unknown boot method"},
		{"unknown policy", id, Request{Policy: "Sometimes"}, "", "unknown policy"},
		{"no artifact server", id, Request{}, "", "needs an artifact server URL"},
		{"bad artifact server", id, Request{ArtifactBaseURL: "ftp://x"}, "", "not an http(s) URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
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
			p, err := Resolve(id, Request{Method: m, ArtifactBaseURL: "http://10.0.0.5:8080"})
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := p.WriteText(&got); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "plan-"+string(m)+".txt")
			if *update {
				if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got.String() != string(want) {
				t.Errorf("plan text differs from %s:\n%s", golden, got.String())
			}
		})
	}
}

func FuzzIdentityFromManifest(f *testing.F) {
	f.Add("uefi-http,pxe", "pxe", osimage.MediaTypeKernel, osimage.MediaTypeInitramfs)
	f.Add("", "", osimage.MediaTypeUKI, osimage.MediaTypeDisk)
	f.Add(",,", "disk", "x", "")
	f.Fuzz(func(t *testing.T, methods, def, mt1, mt2 string) {
		anns := map[string]string{}
		if methods != "" {
			anns[osimage.AnnotationBootMethods] = methods
		}
		if def != "" {
			anns[osimage.AnnotationBootDefault] = def
		}
		id, err := IdentityFromManifest(manifest(anns, mt1, mt2))
		if err != nil {
			return
		}
		// Whatever parses must resolve or fail with ErrPlan, never panic.
		for _, m := range id.Methods {
			if _, err := Resolve(id, Request{Method: m, ArtifactBaseURL: "http://a"}); err != nil && !errors.Is(err, ErrPlan) {
				t.Fatalf("Resolve(%s): %v", m, err)
			}
		}
	})
}

func TestStateRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "state.json")
	st, err := LoadState(p)
	if err != nil || st.Done != 0 {
		t.Fatalf("missing file: %v %+v", err, st)
	}
	st.Done = 3
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
