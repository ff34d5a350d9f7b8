package metaloperator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ironcore-dev/metal-operator/bmc"

	"github.com/ironcore-dev/os-builder/boot"
	metaloperator "github.com/ironcore-dev/os-builder/integrations/metal-operator"
	"github.com/ironcore-dev/os-builder/osimage"
)

// TestAdapterOverMetalOperatorBMC drives the driver through Adapter over
// metal-operator's own bmc.BMC client against its mock server: what the
// interface can do reaches the mock, what it cannot is refused untouched.
func TestAdapterOverMetalOperatorBMC(t *testing.T) {
	m := startMock(t)
	m.reset()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := bmc.NewRedfishBMCClient(ctx, bmc.Options{Endpoint: m.url(""), Username: mockUser, Password: mockPassword,
		BasicAuth: true, ResourcePollingInterval: 50 * time.Millisecond, ResourcePollingTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Logout()
	a := &metaloperator.Adapter{BMC: c, SystemURI: mockSystemURI}

	caps, err := a.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if caps.Manufacturer != "Contoso" || !slices.Equal(caps.AllowedTargets, []string{boot.TargetPxe}) || caps.VirtualMediaCD || caps.ContinuousSupported {
		t.Fatalf("capabilities %+v, want Contoso, [Pxe] only, no virtual media, no Continuous", caps)
	}
	id, err := osimage.ReadIdentity(mustImage(t, "uefi-http,pxe,virtual-media", "uefi-http"))
	if err != nil {
		t.Fatal(err)
	}
	for _, method := range []osimage.BootMethod{boot.MethodAuto, osimage.BootPXE, osimage.BootUEFIHTTP, osimage.BootVirtualMedia} {
		t.Run(string(method), func(t *testing.T) {
			m.reset()
			p, err := boot.ResolveFor(id, boot.Request{Image: "node", Method: method, Policy: boot.NetworkBootAlways,
				ArtifactBaseURL: "http://10.0.0.5:8080"}, &caps)
			if method == osimage.BootUEFIHTTP || method == osimage.BootVirtualMedia {
				if !errors.Is(err, boot.ErrCapability) {
					t.Fatalf("ResolveFor %s: %v, want ErrCapability", method, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Method != osimage.BootPXE {
				t.Fatalf("method %s, want pxe", p.Method)
			}
			st := &boot.State{}
			if err := (&boot.Driver{}).Run(ctx, a, p, st); err != nil {
				t.Fatal(err)
			}
			s := m.waitPower("On")
			if s.Boot.BootSourceOverrideTarget != "Pxe" || s.Boot.BootSourceOverrideEnabled != "Once" {
				t.Errorf("mock override %s/%s, want Pxe/Once", s.Boot.BootSourceOverrideTarget, s.Boot.BootSourceOverrideEnabled)
			}
			// Read back through metal-operator's connection.
			if o, err := a.BootOverride(ctx); err != nil || o.Target != "Pxe" || o.Enabled != "Once" {
				t.Errorf("BootOverride = %+v, %v; want Pxe/Once", o, err)
			}
		})
	}
	// What bmc.BMC cannot express is refused without a BMC change.
	m.reset()
	for _, o := range []boot.Override{{Target: boot.TargetHdd, Enabled: boot.EnabledContinuous}, {Target: boot.TargetUefiHttp, Enabled: boot.EnabledOnce, HTTPBootURI: "http://x/uki.efi"}} {
		if err := a.SetBootOverride(ctx, o); !errors.Is(err, boot.ErrCapability) {
			t.Errorf("SetBootOverride(%+v) = %v, want ErrCapability", o, err)
		}
	}
	if err := a.InsertMedia(ctx, "http://x/image.iso"); !errors.Is(err, boot.ErrCapability) {
		t.Errorf("InsertMedia = %v, want ErrCapability", err)
	}
	if s := m.system(); s.Boot.BootSourceOverrideTarget != "None" || s.Boot.BootSourceOverrideEnabled != "Disabled" {
		t.Errorf("refused calls changed the mock: %+v", s)
	}
	// Clearing the override goes through SetBootOrder.
	if err := a.SetBootOverride(ctx, boot.Override{Target: boot.TargetPxe, Enabled: boot.EnabledOnce}); err != nil {
		t.Fatal(err)
	}
	if err := a.SetBootOverride(ctx, boot.Override{Target: boot.TargetNone, Enabled: boot.EnabledDisabled}); err != nil {
		t.Fatal(err)
	}
	if s := m.system(); s.Boot.BootSourceOverrideTarget != "None" {
		t.Errorf("override not cleared: %+v", s)
	}
	if ps, err := a.PowerState(ctx); err != nil || ps != fmt.Sprint(m.system().PowerState) {
		t.Errorf("PowerState = %q, %v; mock says %q", ps, err, m.system().PowerState)
	}
}
