package metaloperator_test

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	metalv1alpha1 "github.com/ironcore-dev/metal-operator/api/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/os-builder/boot"
	metaloperator "github.com/ironcore-dev/os-builder/integrations/metal-operator"
)

func TestResolveTarget(t *testing.T) {
	m := &mockBMC{host: "10.0.0.7", port: 443}
	secret := func(o *metaloperator.Objects) {}
	for _, tc := range []struct {
		name   string
		edit   func(o *metaloperator.Objects)
		scheme metalv1alpha1.ProtocolScheme
		want   string // endpoint, or the error's text
	}{
		{name: "bmc inline access", edit: secret, want: "http://10.0.0.7:443"},
		{name: "scheme default", scheme: "https", edit: func(o *metaloperator.Objects) { o.BMC.Spec.Protocol.Scheme = "" }, want: "https://10.0.0.7:443"},
		{name: "ipv6 endpoint object", edit: func(o *metaloperator.Objects) {
			o.BMC.Spec.Endpoint = nil
			o.BMC.Spec.EndpointRef = &corev1.LocalObjectReference{Name: "ep"}
			o.Endpoint = &metalv1alpha1.Endpoint{ObjectMeta: metav1.ObjectMeta{Name: "ep"}, Spec: metalv1alpha1.EndpointSpec{IP: metalv1alpha1.IP{Addr: netip.MustParseAddr("fd00::7")}}}
		}, want: "http://[fd00::7]:443"},
		{name: "server inline bmc", edit: func(o *metaloperator.Objects) {
			o.Server.Spec.BMCRef, o.BMC = nil, nil
			o.Server.Spec.BMC = &metalv1alpha1.BMCAccess{Address: "10.0.0.8", BMCSecretRef: corev1.LocalObjectReference{Name: "bmc-secret"},
				Protocol: metalv1alpha1.Protocol{Name: metalv1alpha1.ProtocolNameRedfish, Port: 8443, Scheme: "https"}}
		}, want: "https://10.0.0.8:8443"},
		{name: "wrong BMC object", edit: func(o *metaloperator.Objects) { o.BMC.Name = "other" }, want: `spec.bmcRef names BMC "bmc"`},
		{name: "endpoint missing", edit: func(o *metaloperator.Objects) {
			o.BMC.Spec.Endpoint, o.BMC.Spec.EndpointRef = nil, &corev1.LocalObjectReference{Name: "ep"}
		}, want: `spec.endpointRef names Endpoint "ep"`},
		{name: "ipmi", edit: func(o *metaloperator.Objects) { o.BMC.Spec.Protocol.Name = metalv1alpha1.ProtocolNameIPMI }, want: `protocol "IPMI"`},
		{name: "other secret", edit: func(o *metaloperator.Objects) { o.Secret.Name = "x" }, want: `names BMCSecret "bmc-secret"`},
		{name: "secret without password", edit: func(o *metaloperator.Objects) { delete(o.Secret.Data, "password") }, want: "for key 'password'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := objects(m, "img", nil)
			tc.edit(&o)
			got, err := metaloperator.ResolveTarget(o, tc.scheme)
			if strings.Contains(tc.want, "://") {
				if err != nil || got.Endpoint != tc.want || got.Username != mockUser || got.Password != mockPassword {
					t.Fatalf("ResolveTarget = %v, %v; want %s", got, err, tc.want)
				}
				if s := fmt.Sprintf("%v %+v %#v", got, got, got); strings.Contains(s, mockPassword) {
					t.Errorf("Target prints its password: %s", s)
				}
				return
			}
			if !errors.Is(err, metaloperator.ErrObjects) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrObjects naming %q", err, tc.want)
			}
		})
	}
}

func TestResolveRequest(t *testing.T) {
	m := &mockBMC{host: "10.0.0.7", port: 443}
	for _, tc := range []struct {
		name, sbcImage, claimImage string
		ann                        map[string]string
		want                       metaloperator.Request
		err                        string
	}{
		{name: "defaults", sbcImage: "a", want: metaloperator.Request{Image: "a", Policy: boot.NetworkBootOnce}},
		{name: "claim image", claimImage: "b", want: metaloperator.Request{Image: "b", Policy: boot.NetworkBootOnce}},
		{name: "policy and method", sbcImage: "a", ann: map[string]string{metaloperator.AnnotationBootPolicy: "NetworkBootAlways", metaloperator.AnnotationBootMethod: "pxe"},
			want: metaloperator.Request{Image: "a", Policy: boot.NetworkBootAlways, Method: "pxe"}},
		{name: "bad policy", sbcImage: "a", ann: map[string]string{metaloperator.AnnotationBootPolicy: "Sometimes"}, err: `annotation boot.os-builder.ironcore.dev/boot-policy: unknown policy "Sometimes"`},
		{name: "bad method", sbcImage: "a", ann: map[string]string{metaloperator.AnnotationBootMethod: "floppy"}, err: `unknown boot method "floppy"`},
		{name: "no image", err: "spec.image is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := objects(m, tc.sbcImage, tc.ann)
			o.Claim.Spec.Image = tc.claimImage
			got, err := metaloperator.ResolveRequest(o)
			if tc.err != "" {
				if !errors.Is(err, metaloperator.ErrObjects) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want ErrObjects naming %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ResolveRequest = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestStateOfBounded: a state annotation over 64 KiB (maxStateAnnotation) is
// refused before it is decoded, as an invalid state naming its size.
func TestStateOfBounded(t *testing.T) {
	for _, v := range []string{strings.Repeat(" ", 64<<10+1), `{"done":0}` + strings.Repeat(" ", 70<<10)} {
		sbc := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{metaloperator.AnnotationBootState: v}}}
		_, err := metaloperator.StateOf(metaloperator.Objects{BootConfig: sbc})
		if !errors.Is(err, boot.ErrInvalidState) || !strings.Contains(err.Error(), strconv.Itoa(len(v))) {
			t.Errorf("%d-byte annotation: %v, want an invalid state naming its size", len(v), err)
		}
	}
}

// FuzzStateOf: the state annotation is outside input (anyone with write
// access to the ServerBootConfiguration); decoding it never panics, and what
// it accepts survives ApplyTo's encoding unchanged.
func FuzzStateOf(f *testing.F) {
	f.Add(`{"planDigest":"sha256:` + strings.Repeat("a", 64) + `","done":2,"networkBooted":true}`)
	f.Add(`{"done":-1}`)
	f.Add(`{"done":3}`)
	f.Add(`{`)
	// No seed past maxStateAnnotation (TestStateOfBounded has one): the
	// fuzzer mutating 70 KiB spent its time copying it (5 s: 1,615 execs
	// with it).
	f.Fuzz(func(t *testing.T, v string) {
		sbc := &metalv1alpha1.ServerBootConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "s", Annotations: map[string]string{metaloperator.AnnotationBootState: v}}}
		st, err := metaloperator.StateOf(metaloperator.Objects{BootConfig: sbc})
		if err != nil {
			if !errors.Is(err, boot.ErrInvalidState) {
				t.Fatalf("error %v is not ErrInvalidState", err)
			}
			return
		}
		if st.Done < 0 || (st.PlanDigest == "" && st.Done != 0) {
			t.Fatalf("accepted an impossible state %+v", st)
		}
		out := &metalv1alpha1.ServerBootConfiguration{}
		if err := metaloperator.ApplyTo(metaloperator.Result{State: st}, out, nil); err != nil {
			t.Fatal(err)
		}
		if st.PlanDigest == "" {
			return
		}
		again, err := metaloperator.StateOf(metaloperator.Objects{BootConfig: out})
		if err != nil || again.PlanDigest != st.PlanDigest || again.Done != st.Done || again.NetworkBooted != st.NetworkBooted {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, st)
		}
	})
}
