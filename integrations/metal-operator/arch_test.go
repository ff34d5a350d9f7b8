package metaloperator_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	metalv1alpha1 "github.com/ironcore-dev/metal-operator/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/os-builder/boot"
	metaloperator "github.com/ironcore-dev/os-builder/integrations/metal-operator"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
)

// TestServerArchitecture: metal-operator's Server status.processors (read
// from the BMC's Processors at discovery) say the architecture: the first
// CPU whose instructionSet names one.
func TestServerArchitecture(t *testing.T) {
	cpu := func(id, typ, set string) metalv1alpha1.Processor {
		return metalv1alpha1.Processor{ID: id, Type: typ, InstructionSet: set}
	}
	for _, tc := range []struct {
		name       string
		procs      []metalv1alpha1.Processor
		arch, from string
	}{
		{"none", nil, "", ""},
		{"x86", []metalv1alpha1.Processor{cpu("CPU1", "CPU", "x86-64")}, "amd64", "Server server status.processors[CPU1].instructionSet x86-64"},
		// The mock's own pair: an FPGA with instruction set OEM next to the CPU.
		{"FPGA first", []metalv1alpha1.Processor{cpu("FPGA1", "FPGA", "OEM"), cpu("CPU1", "CPU", "x86-64")}, "amd64", "status.processors[CPU1]"},
		{"empty socket, arm", []metalv1alpha1.Processor{cpu("CPU0", "CPU", ""), cpu("CPU1", "", "ARM-A64")}, "arm64", "status.processors[CPU1].instructionSet ARM-A64"},
		{"OEM only", []metalv1alpha1.Processor{cpu("CPU1", "CPU", "OEM")}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &metalv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Name: "server"}, Status: metalv1alpha1.ServerStatus{Processors: tc.procs}}
			arch, from := metaloperator.ServerArchitecture(s)
			if arch != tc.arch || !strings.Contains(from, tc.from) || (tc.from == "" && from != "") {
				t.Errorf("ServerArchitecture = %q, %q; want %q, %q", arch, from, tc.arch, tc.from)
			}
		})
	}
}

// pushArchIndex pushes an index with one build of mustImage per
// architecture (blobs of its own each) to a real registry
// (docker-registry), and returns its reference by digest and each build's
// identity.
func pushArchIndex(t *testing.T, host, repo string, archs ...string) (string, map[string]*osimage.BootIdentity) {
	t.Helper()
	ids := map[string]*osimage.BootIdentity{}
	var adds []mutate.IndexAddendum
	for i, arch := range archs {
		img := mustImage(t, "uefi-http,pxe,virtual-media,disk", "uefi-http")
		// Blobs of its own: one more layer makes each build's manifest
		// differ; the boot layers differ by the architecture annotation
		// only, which is what the check below looks at.
		img, err := mutate.Append(img, mutate.Addendum{Layer: staticLayer(arch, i), MediaType: types.MediaType(osimage.MediaTypeCmdline)})
		if err != nil {
			t.Fatal(err)
		}
		img = mutate.Annotations(img, map[string]string{osimage.AnnotationArchitecture: arch}).(v1.Image)
		if ids[arch], err = osimage.ReadIdentity(img); err != nil {
			t.Fatal(err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	ref, err := name.ParseReference(host+"/"+repo+":1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.Context().Digest(d.String()).String(), ids
}

// TestBootPicksServerArchitecture: the Booter passes the Server's
// architecture (status.processors) the way serverboot passes --arch; where
// the status says nothing the BMC's Processors do (the mock's CPU1:
// x86-64); an image without the server's architecture is InvalidPlan, the
// ServerBootConfiguration goes to Error, and the BMC is untouched.
func TestBootPicksServerArchitecture(t *testing.T) {
	m := startMock(t)
	host := testutil.NewRegistry(t)
	both, _ := pushArchIndex(t, host, "os/both", "amd64", "arm64")
	amd64Only, _ := pushArchIndex(t, host, "os/amd64", "amd64")
	for _, tc := range []struct {
		name    string
		client  string
		image   string
		procs   []metalv1alpha1.Processor
		want    string // ArchitectureSelected message
		refusal string
	}{
		{"status says arm64", "os-builder", both, []metalv1alpha1.Processor{{ID: "CPU1", Type: "CPU", InstructionSet: "ARM-A64"}},
			"arm64 (Server server status.processors[CPU1].instructionSet ARM-A64)", ""},
		{"status says nothing: the BMC, os-builder's client", "os-builder", both, nil, "amd64 (the BMC's Processors report x86-64)", ""},
		{"status says nothing: the BMC, metal-operator's client", "metal-operator", both, nil, "amd64 (the BMC's Processors report x86-64)", ""},
		{"arm64 server, amd64 image", "os-builder", amd64Only, []metalv1alpha1.Processor{{ID: "CPU1", Type: "CPU", InstructionSet: "ARM-A64"}}, "",
			"the server is arm64 (Server server status.processors[CPU1].instructionSet ARM-A64), image " + amd64Only + " is built for [amd64] only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.reset()
			o := objects(m, tc.image, nil)
			o.Server.Status.Processors = tc.procs
			connect := osbuilderClient
			if tc.client == "metal-operator" {
				connect = metalOperatorClient
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := booter(t, tc.image, connect).Boot(ctx, o)
			if err2 := metaloperator.ApplyTo(res, o.BootConfig, o.Claim); err2 != nil {
				t.Fatal(err2)
			}
			if tc.refusal != "" {
				c := condition(t, res.Conditions, metaloperator.ConditionBootCompleted)
				if !errors.Is(err, boot.ErrPlan) || c.Reason != metaloperator.ReasonInvalidPlan || !strings.Contains(c.Message, tc.refusal) {
					t.Fatalf("err %v, BootCompleted %+v; want InvalidPlan naming %q", err, c, tc.refusal)
				}
				if o.BootConfig.Status.State != metalv1alpha1.ServerBootConfigurationStateError {
					t.Errorf("ServerBootConfiguration state %s, want Error", o.BootConfig.Status.State)
				}
				time.Sleep(200 * time.Millisecond) // longer than the mock's power transitions
				if s := m.system(); s.PowerState != "Off" || s.Boot.BootSourceOverrideTarget != "None" {
					t.Errorf("a refused boot touched the BMC: %+v", s)
				}
				return
			}
			if err != nil {
				t.Fatalf("Boot: %v\nconditions: %+v", err, res.Conditions)
			}
			m.waitPower("On")
			if c := condition(t, res.Conditions, metaloperator.ConditionArchitectureSelected); c.Message != tc.want {
				t.Errorf("ArchitectureSelected %q, want %q", c.Message, tc.want)
			}
			arch := strings.Fields(tc.want)[0]
			if res.Plan.Architecture != arch {
				t.Errorf("plan architecture %q, want %q", res.Plan.Architecture, arch)
			}
		})
	}
}

// staticLayer is a small layer of its own per architecture.
func staticLayer(arch string, i int) v1.Layer {
	return static.NewLayer([]byte(arch+" "+string(rune('0'+i))), types.MediaType(osimage.MediaTypeCmdline))
}
