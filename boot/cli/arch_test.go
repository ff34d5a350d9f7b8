package cli

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/boot/redfish"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/redfishemu"
)

// pushArchIndex pushes an OCI index with one UKI image per architecture to
// a real registry (docker-registry) and returns its reference.
func pushArchIndex(t *testing.T, host, repo string, archs ...string) string {
	t.Helper()
	var adds []mutate.IndexAddendum
	for _, arch := range archs {
		img, err := mutate.Append(mutate.MediaType(empty.Image, types.OCIManifestSchema1), mutate.Addendum{
			Layer: static.NewLayer([]byte(arch+" uki"), osimage.MediaTypeUKI), MediaType: osimage.MediaTypeUKI,
			Annotations: map[string]string{osimage.AnnotationTitle: "uki.efi"}})
		if err != nil {
			t.Fatal(err)
		}
		img = mutate.Annotations(img, map[string]string{osimage.AnnotationBootMethods: "uefi-http", osimage.AnnotationArchitecture: arch}).(v1.Image)
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	ref, err := name.ParseReference(host+"/"+repo+":1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)); err != nil {
		t.Fatal(err)
	}
	return ref.String()
}

// TestArchitectureExitCodes: the server's architecture (the BMC's
// Processors, or --arch) picks the index's build; an image without it is
// exit 3 naming both sides, before any change on the BMC; a bad --arch is
// exit 2.
func TestArchitectureExitCodes(t *testing.T) {
	host := testutil.NewRegistry(t)
	both := pushArchIndex(t, host, "os/both", "amd64", "arm64")
	amd64Only := pushArchIndex(t, host, "os/amd64", "amd64")
	t.Setenv(redfish.EnvUsername, "admin")
	t.Setenv(redfish.EnvPassword, "password")
	listen := testutil.FreeAddr(t)
	for _, tc := range []struct {
		name     string
		set      string // the emulated CPU's InstructionSet; "" none
		image    string
		args     []string
		code     int
		want     []string // in stdout+stderr
		noBMCArg bool
	}{
		{"arm64 BMC, both builds", "ARM-A64", both, nil, ExitOK, []string{"arch:   arm64 (the BMC's Processors report ARM-A64)"}, false},
		{"x86 BMC, both builds", "x86-64", both, nil, ExitOK, []string{"arch:   amd64 (the BMC's Processors report x86-64)"}, false},
		{"--arch overrides the BMC", "x86-64", both, []string{"--arch", "arm64"}, ExitOK, []string{"arch:   arm64 (--arch)"}, false},
		{"arm64 BMC, amd64 image", "ARM-A64", amd64Only, nil, ExitMismatch,
			[]string{"the server is arm64 (the BMC's Processors report ARM-A64), image " + amd64Only + " is built for [amd64] only"}, false},
		{"--arch without the image's build", "x86-64", amd64Only, []string{"--arch", "arm64"}, ExitMismatch,
			[]string{"the server is arm64 (--arch), image " + amd64Only + " is built for [amd64] only"}, false},
		{"BMC says nothing, both builds", "", both, nil, ExitMismatch,
			[]string{"the server's architecture is unknown (the BMC reports no InstructionSet for the system's CPUs) and image " + both + " is built for [amd64 arm64]: say which with --arch"}, false},
		{"BMC says nothing, one build", "", amd64Only, nil, ExitOK,
			[]string{"arch:   amd64 (the image's only architecture; the BMC reports no InstructionSet for the system's CPUs)"}, false},
		{"no BMC, both builds", "", both, nil, ExitMismatch, []string{"unknown (no BMC asked)", "say which with --arch"}, true},
		{"no BMC, --arch", "", both, []string{"--arch", "arm64"}, ExitOK, []string{"arch:   arm64 (--arch)"}, true},
		{"unknown --arch", "x86-64", both, []string{"--arch", "aarch64"}, ExitUsage, []string{`--arch: unknown architecture "aarch64"`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emu := redfishemu.New(redfishemu.Options{InstructionSet: tc.set, NoInstructionSet: tc.set == ""})
			bmc := httptest.NewServer(emu)
			defer bmc.Close()
			args := append([]string{"plan", "--image", tc.image, "--insecure", "--artifact-listen", listen}, tc.args...)
			if !tc.noBMCArg {
				args = append(args, "--bmc", bmc.URL)
			}
			code, stdout, stderr := run(t, args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout+stderr, w) {
					t.Errorf("output does not name %q\nstdout: %s\nstderr: %s", w, stdout, stderr)
				}
			}
			if emu.Resets() != 0 || emu.State().OverrideTarget != "None" {
				t.Errorf("plan changed the BMC: %+v, %d resets", emu.State(), emu.Resets())
			}
		})
	}

	// boot refuses as plan does, before any change on the BMC.
	emu := redfishemu.New(redfishemu.Options{InstructionSet: "ARM-A64"})
	bmc := httptest.NewServer(emu)
	defer bmc.Close()
	if code, stdout, stderr := run(t, "status", "--bmc", bmc.URL); code != ExitOK || !strings.Contains(stdout, "arch:         arm64 (the BMC's Processors report ARM-A64)") {
		t.Errorf("status: exit %d, want the arch line\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	code, _, stderr := run(t, "boot", "--bmc", bmc.URL, "--image", amd64Only, "--insecure", "--artifact-listen", listen,
		"--artifact-cache-dir", filepath.Join(t.TempDir(), "cache"), "--serve-after-boot", "0s", "--timeout", "20s")
	if code != ExitMismatch || !strings.Contains(stderr, "the server is arm64") || !strings.Contains(stderr, "built for [amd64] only") {
		t.Errorf("boot of an amd64 image on an arm64 BMC: exit %d, want 3 naming both\nstderr: %s", code, stderr)
	}
	if emu.Resets() != 0 || emu.State().OverrideTarget != "None" || len(emu.Boots()) != 0 {
		t.Errorf("a refused boot changed the BMC: %+v, %d resets", emu.State(), emu.Resets())
	}
}
