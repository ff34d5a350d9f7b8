package metaloperator_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	metalv1alpha1 "github.com/ironcore-dev/metal-operator/api/v1alpha1"
	"github.com/ironcore-dev/metal-operator/bmc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/boot/artifacts"
	metaloperator "github.com/ironcore-dev/os-builder/integrations/metal-operator"
)

// objects are what a metal-operator controller holds for one claimed server:
// a Server pointing at its BMC, the BMC (inline access) with its BMCSecret,
// the claim and the ServerBootConfiguration naming the image.
func objects(m *mockBMC, image string, claimAnnotations map[string]string) metaloperator.Objects {
	return objectsFor(m, image, claimAnnotations, mockSystemURI)
}

func objectsFor(m *mockBMC, image string, claimAnnotations map[string]string, systemURI string) metaloperator.Objects {
	ip := netip.MustParseAddr(m.host)
	return metaloperator.Objects{
		Claim: &metalv1alpha1.ServerClaim{ObjectMeta: metav1.ObjectMeta{Name: "claim", Annotations: claimAnnotations},
			Spec: metalv1alpha1.ServerClaimSpec{Power: metalv1alpha1.PowerOn, Image: image, ServerRef: &corev1.LocalObjectReference{Name: "server"}}},
		BootConfig: &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "claim", Generation: 3},
			Spec: metalv1alpha1.ServerBootConfigurationSpec{ServerRef: corev1.LocalObjectReference{Name: "server"}, Image: image}},
		// metal-operator sets spec.systemURI at discovery.
		Server: &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "server"},
			Spec: metalv1alpha1.ServerSpec{SystemUUID: mockSystemUUID, SystemURI: systemURI, BMCRef: &corev1.LocalObjectReference{Name: "bmc"}}},
		BMC: &metalv1alpha1.BMC{ObjectMeta: metav1.ObjectMeta{Name: "bmc"}, Spec: metalv1alpha1.BMCSpec{
			Endpoint:     &metalv1alpha1.InlineEndpoint{IP: metalv1alpha1.IP{Addr: ip}},
			BMCSecretRef: corev1.LocalObjectReference{Name: "bmc-secret"},
			Protocol:     metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolNameRedfish, Port: m.port, Scheme: metalv1alpha1.HTTPProtocolScheme}}},
		Secret: &metalv1alpha1.BMCSecret{ObjectMeta: metav1.ObjectMeta{Name: "bmc-secret"},
			Data: map[string][]byte{metalv1alpha1.BMCSecretUsernameKeyName: []byte(mockUser), metalv1alpha1.BMCSecretPasswordKeyName: []byte(mockPassword)}},
	}
}

// booter is what a controller sets up once: the driver with a real artifact
// server in front of the image's registry.
func booter(t *testing.T, image string, connect func(context.Context, metaloperator.Target) (boot.BMC, func(), error)) *metaloperator.Booter {
	t.Helper()
	ref, err := name.ParseReference(image)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(nil)
	srv, err := artifacts.NewServer(artifacts.RegistrySource{Repo: ref.Context()}, filepath.Join(t.TempDir(), "cache"), "http://"+hs.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	hs.Config.Handler = srv
	hs.Start()
	t.Cleanup(hs.Close)
	return &metaloperator.Booter{Driver: &boot.Driver{Publisher: srv}, ArtifactBaseURL: srv.AdvertiseURL(), Connect: connect}
}

// The two clients: os-builder's (the default) and metal-operator's own
// behind Adapter, with Basic Auth as metal-operator's suite runs the mock.
var (
	osbuilderClient     func(context.Context, metaloperator.Target) (boot.BMC, func(), error) // nil: Booter's default
	metalOperatorClient = func(ctx context.Context, t metaloperator.Target) (boot.BMC, func(), error) {
		return metaloperator.ConnectMetalOperator(ctx, t, bmc.Options{BasicAuth: true})
	}
)

func condition(t *testing.T, cs []metav1.Condition, typ string) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(cs, typ)
	if c == nil {
		t.Fatalf("no condition %s in %+v", typ, cs)
	}
	if c.ObservedGeneration != 3 {
		t.Errorf("%s: observedGeneration %d, want the ServerBootConfiguration's 3", typ, c.ObservedGeneration)
	}
	return c
}

// TestBootFromMetalOperatorObjects drives boots from metal-operator objects
// through the driver against metal-operator's mock BMC, per policy, and
// checks the mock's resulting state and the conditions for the status.
func TestBootFromMetalOperatorObjects(t *testing.T) {
	m := startMock(t)
	// The image prefers UEFI HTTP; metal-operator's client can only do PXE.
	image := pushImage(t, "uefi-http,pxe,virtual-media,disk", "uefi-http")
	for _, tc := range []struct {
		client         string
		connect        func(context.Context, metaloperator.Target) (boot.BMC, func(), error)
		policy         string // claim annotation; "" = absent (NetworkBootOnce)
		target, enable string // the mock's override afterwards
		choice         string
		networkBooted  bool
	}{
		// os-builder's client: PXE once, then disk pinned (Hdd Continuous).
		{client: "os-builder", connect: osbuilderClient, policy: "", target: "Hdd", enable: "Continuous", networkBooted: true,
			choice: "method: pxe (image prefers uefi-http; BMC allows [Pxe Cd Usb Hdd BiosSetup Utilities Diags SDCard UefiTarget])"},
		{client: "os-builder", connect: osbuilderClient, policy: "NetworkBootAlways", target: "Pxe", enable: "Once",
			choice: "method: pxe (image prefers uefi-http; BMC allows [Pxe Cd Usb Hdd BiosSetup Utilities Diags SDCard UefiTarget])"},
		{client: "os-builder", connect: osbuilderClient, policy: "None", target: "None", enable: "Disabled"},
		// metal-operator's client behind Adapter: PXE once, then the
		// override cleared (its SetBootOrder sends Continuous/None).
		{client: "metal-operator", connect: metalOperatorClient, policy: "", target: "None", enable: "Continuous", networkBooted: true,
			choice: "method: pxe (image prefers uefi-http; BMC allows [Pxe])"},
		{client: "metal-operator", connect: metalOperatorClient, policy: "NetworkBootAlways", target: "Pxe", enable: "Once",
			choice: "method: pxe (image prefers uefi-http; BMC allows [Pxe])"},
		// None: power only; the override stays as it was.
		{client: "metal-operator", connect: metalOperatorClient, policy: "None", target: "None", enable: "Disabled"},
	} {
		t.Run(tc.client+"/policy="+tc.policy, func(t *testing.T) {
			m.reset()
			ann := map[string]string{}
			if tc.policy != "" {
				ann[metaloperator.AnnotationBootPolicy] = tc.policy
			}
			o := objects(m, image, ann)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := booter(t, image, tc.connect).Boot(ctx, o)
			if err != nil {
				t.Fatalf("Boot: %v\nconditions: %+v", err, res.Conditions)
			}
			s := m.waitPower("On")
			if s.Boot.BootSourceOverrideTarget != tc.target || s.Boot.BootSourceOverrideEnabled != tc.enable {
				t.Errorf("mock override %s/%s, want %s/%s", s.Boot.BootSourceOverrideTarget, s.Boot.BootSourceOverrideEnabled, tc.target, tc.enable)
			}
			if c := condition(t, res.Conditions, metaloperator.ConditionBootCompleted); c.Status != metav1.ConditionTrue {
				t.Errorf("BootCompleted: %+v", c)
			}
			if c := condition(t, res.Conditions, boot.ConditionPowerActionIssued); c.Reason != "On" {
				t.Errorf("PowerActionIssued: %+v, want reason On (the mock was off)", c)
			}
			nb := meta.FindStatusCondition(res.Conditions, boot.ConditionNetworkBootedOnce)
			if tc.networkBooted != (nb != nil && nb.Status == metav1.ConditionTrue && nb.Reason == "NetworkBootPerformed") {
				t.Errorf("NetworkBootedOnce: %+v, want set: %t", nb, tc.networkBooted)
			}
			if tc.policy != "None" {
				c := condition(t, res.Conditions, metaloperator.ConditionBootMethodSelected)
				if c.Message != tc.choice {
					t.Errorf("BootMethodSelected message %q, want %q", c.Message, tc.choice)
				}
				condition(t, res.Conditions, boot.ConditionArtifactsPublished)
			}
			// The conditions land in the ServerBootConfiguration's status,
			// ready for a status update.
			if err := metaloperator.ApplyTo(res, o.BootConfig, o.Claim); err != nil {
				t.Fatal(err)
			}
			if o.BootConfig.Status.State != metalv1alpha1.ServerBootConfigurationStateReady {
				t.Errorf("ServerBootConfiguration state %s, want Ready", o.BootConfig.Status.State)
			}
			if got := o.Claim.Annotations[metaloperator.AnnotationNetworkBooted] == "true"; got != tc.networkBooted {
				t.Errorf("claim network-booted mark %t, want %t", got, tc.networkBooted)
			}
			if !tc.networkBooted {
				return
			}
			// Seed 001: after a NetworkBootOnce boot the ServerBootConfiguration
			// is deleted; a new one for the same claim must not re-provision.
			m.reset()
			again := objects(m, image, ann)
			again.Claim = o.Claim
			res, err = booter(t, image, tc.connect).Boot(ctx, again)
			if err != nil {
				t.Fatalf("second Boot: %v", err)
			}
			if c := condition(t, res.Conditions, boot.ConditionNetworkBootedOnce); c.Reason != "AlreadyNetworkBooted" {
				t.Errorf("second run NetworkBootedOnce %+v, want reason AlreadyNetworkBooted", c)
			}
			time.Sleep(200 * time.Millisecond) // longer than the mock's power transitions
			if s := m.system(); s.PowerState != "Off" || s.Boot.BootSourceOverrideTarget != "None" || s.Boot.BootSourceOverrideEnabled != "Disabled" {
				t.Errorf("second run touched the BMC: %+v", s)
			}
		})
	}
}

// TestBootRefusesWhatTheBMCCannotDo: a method metal-operator's client (behind
// Adapter) cannot do is refused before any change on the BMC, with a reason that puts the
// ServerBootConfiguration into Error.
func TestBootRefusesWhatTheBMCCannotDo(t *testing.T) {
	m := startMock(t)
	for _, tc := range []struct {
		name, methods, def string
		ann                map[string]string
		want               string
	}{
		{name: "forced uefi-http", methods: "uefi-http,pxe", def: "uefi-http",
			ann: map[string]string{metaloperator.AnnotationBootMethod: "uefi-http"}, want: "method uefi-http: BMC capability: BMC offers no UefiHttp boot target (allows [Pxe])"},
		{name: "forced virtual-media", methods: "virtual-media,pxe", def: "virtual-media",
			ann: map[string]string{metaloperator.AnnotationBootMethod: "virtual-media"}, want: "method virtual-media: BMC capability: BMC offers no Cd boot target (allows [Pxe])"},
		{name: "image without pxe", methods: "uefi-http,virtual-media", def: "uefi-http",
			want: "no boot method fits: the image offers [uefi-http virtual-media], the BMC allows [Pxe]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.reset()
			image := pushImage(t, tc.methods, tc.def)
			o := objects(m, image, tc.ann)
			res, err := booter(t, image, metalOperatorClient).Boot(context.Background(), o)
			if !errors.Is(err, boot.ErrCapability) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Boot error %v, want ErrCapability naming %q", err, tc.want)
			}
			c := condition(t, res.Conditions, metaloperator.ConditionBootCompleted)
			if c.Status != metav1.ConditionFalse || c.Reason != metaloperator.ReasonCapabilityMissing {
				t.Errorf("BootCompleted %+v, want False/CapabilityMissing", c)
			}
			if err := metaloperator.ApplyTo(res, o.BootConfig, o.Claim); err != nil {
				t.Fatal(err)
			}
			if o.BootConfig.Status.State != metalv1alpha1.ServerBootConfigurationStateError {
				t.Errorf("state %s, want Error", o.BootConfig.Status.State)
			}
			time.Sleep(200 * time.Millisecond)
			if s := m.system(); s.PowerState != "Off" || s.Boot.BootSourceOverrideTarget != "None" {
				t.Errorf("a refused boot changed the BMC: %+v", s)
			}
		})
	}
}
