package boot

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
)

// TestMethodAuto: the image's methods in its order of preference, the first
// the BMC allows; a forced method refuses instead of falling back; nothing
// fitting is refused naming what the image offers and the BMC allows.
func TestMethodAuto(t *testing.T) {
	id := fullIdentity(t) // uefi-http (default), pxe, virtual-media, disk
	tests := []struct {
		name       string
		method     osimage.BootMethod
		caps       Capabilities
		want       osimage.BootMethod
		wantChoice string
		wantErr    string
	}{
		{"first choice", MethodAuto, Capabilities{AllowedTargets: []string{"Pxe", "UefiHttp", "Hdd"}, ContinuousSupported: true},
			osimage.BootUEFIHTTP, "image's first choice; BMC allows [Pxe UefiHttp Hdd]", ""},
		{"empty is auto", "", Capabilities{AllowedTargets: []string{"None", "Pxe", "Cd", "Hdd"}, VirtualMediaCD: true, ContinuousSupported: true},
			osimage.BootPXE, "image prefers uefi-http; BMC allows [Pxe Cd Hdd]", ""},
		{"cd target without a slot", MethodAuto, Capabilities{AllowedTargets: []string{"Cd", "Hdd"}},
			"", "", "no boot method fits: the image offers [uefi-http pxe virtual-media], the BMC allows [Cd Hdd] (uefi-http: BMC offers no UefiHttp boot target (allows [Cd Hdd]); pxe: BMC offers no Pxe boot target (allows [Cd Hdd]); virtual-media: BMC has no CD-capable virtual media slot)"},
		{"virtual media", MethodAuto, Capabilities{AllowedTargets: []string{"Cd", "Hdd"}, VirtualMediaCD: true, ContinuousSupported: true},
			osimage.BootVirtualMedia, "image prefers uefi-http; BMC allows [Cd Hdd]", ""},
		{"forced refuses", osimage.BootUEFIHTTP, Capabilities{AllowedTargets: []string{"Pxe", "Hdd"}},
			"", "", "method uefi-http: BMC capability: BMC offers no UefiHttp boot target (allows [Pxe Hdd])"},
		{"forced fits", osimage.BootPXE, Capabilities{AllowedTargets: []string{"Pxe", "Hdd"}, ContinuousSupported: true},
			osimage.BootPXE, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ResolveFor(id, Request{Image: testImage, Method: tc.method, ArtifactBaseURL: "http://10.0.0.5:8080"}, &tc.caps)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrCapability) || err.Error() != tc.wantErr && !strings.HasSuffix(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v\nwant %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Method != tc.want || p.Choice != tc.wantChoice {
				t.Errorf("method %s (%s), want %s (%s)", p.Method, p.Choice, tc.want, tc.wantChoice)
			}
			if p.Steps[0].Kind != StepCheckCapability {
				t.Errorf("first step %s, want the capability check before any artifact", p.Steps[0].Kind)
			}
		})
	}
}

// TestPlanGoldenAuto pins the plan text of an auto choice on a BMC without
// Continuous: the method line says which and why, a note says how.
func TestPlanGoldenAuto(t *testing.T) {
	caps := Capabilities{AllowedTargets: []string{"Pxe", "Cd", "Hdd"}, VirtualMediaCD: true}
	for _, policy := range []Policy{NetworkBootOnce, NetworkBootAlways} {
		t.Run(string(policy), func(t *testing.T) {
			p, err := ResolveFor(fullIdentity(t), Request{Image: testImage, Policy: policy, ArtifactBaseURL: "http://10.0.0.5:8080"}, &caps)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := p.WriteText(&got); err != nil {
				t.Fatal(err)
			}
			testutil.Golden(t, filepath.Join("testdata", "plan-auto-"+string(policy)+".txt"), got.Bytes())
		})
	}
}
