package boot

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/osimage"
)

// TestArchitectureOf: every InstructionSet value of the DMTF Processor
// schema maps to one OCI architecture or says why it cannot.
func TestArchitectureOf(t *testing.T) {
	for _, tc := range []struct {
		set, arch, err string
	}{
		{"x86-64", "amd64", ""},
		{"ARM-A64", "arm64", ""},
		{"x86", "386", ""},
		{"ARM-A32", "arm", ""},
		{"RV64", "riscv64", ""},
		{"IA-64", "", "Itanium has no OCI architecture"},
		{"RV32", "", "32-bit RISC-V"},
		{"MIPS32", "", "byte order (mips or mipsle)"},
		{"MIPS64", "", "byte order (mips64 or mips64le)"},
		{"PowerISA", "", "byte order (ppc64 or ppc64le)"},
		{"OEM", "", "OEM instruction set names no architecture"},
		{"arm64", "", `unknown instruction set "arm64"`}, // an OCI name is no InstructionSet
		{"x86_64", "", `unknown instruction set "x86_64"`},
	} {
		t.Run(tc.set, func(t *testing.T) {
			arch, err := ArchitectureOf(tc.set)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ArchitectureOf(%q) = %q, %v; want an error naming %q", tc.set, arch, err, tc.err)
				}
				return
			}
			if err != nil || arch != tc.arch {
				t.Fatalf("ArchitectureOf(%q) = %q, %v; want %q", tc.set, arch, err, tc.arch)
			}
			if CheckArchitecture(arch) != nil {
				t.Errorf("%s maps to %s, which --arch refuses", tc.set, arch)
			}
		})
	}
	if err := CheckArchitecture("x86_64"); err == nil || !strings.Contains(err.Error(), "386, amd64, arm, arm64") {
		t.Errorf("CheckArchitecture(x86_64) = %v, want the known names", err)
	}
}

// builds is a test image's builds, one per architecture, each offering
// every method with blobs of its own.
func builds(t *testing.T, archs ...string) []*osimage.BootIdentity {
	t.Helper()
	var bs []*osimage.BootIdentity
	for _, a := range archs {
		img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
		for _, mt := range []string{osimage.MediaTypeUKI, osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeISO, osimage.MediaTypeDisk} {
			var err error
			img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer([]byte(a+" "+mt), types.MediaType(mt)), MediaType: types.MediaType(mt)})
			if err != nil {
				t.Fatal(err)
			}
		}
		anns := map[string]string{osimage.AnnotationBootMethods: "uefi-http,pxe,virtual-media,disk", osimage.AnnotationBootDefault: "uefi-http"}
		if a != "" {
			anns[osimage.AnnotationArchitecture] = a
		}
		id, err := osimage.ReadIdentity(mutate.Annotations(img, anns).(v1.Image))
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, id)
	}
	return bs
}

// TestPickArchitecture: the server's architecture picks the image's build;
// what happens when either side says nothing.
func TestPickArchitecture(t *testing.T) {
	for _, tc := range []struct {
		name     string
		archs    []string // the image's builds ("" names none)
		server   ServerArch
		want     string // the picked build's architecture
		wantFrom string
		err      string
	}{
		{"amd64 server, multi-arch image", []string{"amd64", "arm64"}, ServerArchFromBMC("x86-64"), "amd64", "the BMC's Processors report x86-64", ""},
		{"arm64 server, multi-arch image", []string{"amd64", "arm64"}, ServerArchFromBMC("ARM-A64"), "arm64", "the BMC's Processors report ARM-A64", ""},
		{"--arch wins", []string{"amd64", "arm64"}, ServerArch{Arch: "arm64", From: "--arch"}, "arm64", "--arch", ""},
		{"arm64 server, amd64 image", []string{"amd64"}, ServerArchFromBMC("ARM-A64"), "", "",
			"the server is arm64 (the BMC's Processors report ARM-A64), image img is built for [amd64] only"},
		{"unknown server, one build", []string{"amd64"}, ServerArchFromBMC(""), "amd64",
			"the image's only architecture; the BMC reports no InstructionSet for the system's CPUs", ""},
		{"unknown server, several builds", []string{"amd64", "arm64"}, ServerArchFromBMC(""), "", "",
			"the server's architecture is unknown (the BMC reports no InstructionSet for the system's CPUs) and image img is built for [amd64 arm64]: say which with --arch"},
		{"OEM instruction set, several builds", []string{"amd64", "arm64"}, ServerArchFromBMC("OEM"), "", "",
			"unknown (the BMC reports instruction set OEM: an OEM instruction set names no architecture)"},
		{"image names no architecture", []string{""}, ServerArchFromBMC("ARM-A64"), "", "the image names no architecture: not checked", ""},
		{"no builds", nil, ServerArchFromBMC("x86-64"), "", "", "image img has no boot manifest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, got, err := pickArchitecture("img", builds(t, tc.archs...), tc.server)
			if tc.err != "" {
				if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want ErrPlan naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if id.Architecture != tc.want || got.Arch != tc.want || got.From != tc.wantFrom {
				t.Errorf("picked %q, server %+v; want %q from %q", id.Architecture, got, tc.want, tc.wantFrom)
			}
		})
	}
}

// TestSessionPicksArchitecture: a session reads the server's architecture
// from the BMC (or takes the request's), boots that build, and refuses an
// image without it before any BMC change.
func TestSessionPicksArchitecture(t *testing.T) {
	for _, tc := range []struct {
		name     string
		archs    []string
		req      Request
		set      string // the BMC's InstructionSet
		connect  bool
		want     string // the plan's architecture
		err      string
		wantCall bool // the BMC was asked (capabilities)
	}{
		{"BMC says arm64", []string{"amd64", "arm64"}, Request{}, "ARM-A64", true, "arm64", "", true},
		{"BMC says amd64", []string{"amd64", "arm64"}, Request{}, "x86-64", true, "amd64", "", true},
		{"request overrides the BMC", []string{"amd64", "arm64"}, Request{Architecture: "amd64", ArchitectureFrom: "--arch"}, "ARM-A64", true, "amd64", "", true},
		{"refused by the BMC's answer", []string{"amd64"}, Request{}, "ARM-A64", true, "", "the server is arm64", true},
		{"refused before connecting", []string{"amd64"}, Request{Architecture: "arm64", ArchitectureFrom: "--arch"}, "x86-64", true, "",
			"the server is arm64 (--arch), image registry.example/os/node@sha256:1234 is built for [amd64] only", false},
		{"no BMC, one build", []string{"arm64"}, Request{}, "", false, "arm64", "", false},
		{"no BMC, several builds", []string{"amd64", "arm64"}, Request{}, "", false, "", "unknown (no BMC asked)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bmc := &sessionBMC{caps: Capabilities{ContinuousSupported: true, VirtualMediaCD: true, InstructionSet: tc.set}}
			req := tc.req
			req.Image, req.ArtifactBaseURL = testImage, "http://10.0.0.5:8080"
			bs := builds(t, tc.archs...)
			s := &Session{Request: req, Images: KnownBuilds(bs)}
			dialer := &sessionDialer{bmc: bmc}
			if tc.connect {
				s.Dialer = dialer
			}
			p, err := s.Plan(t.Context())
			if tc.wantCall != (len(bmc.calls) > 0) || !tc.wantCall && dialer.dials > 0 {
				t.Errorf("BMC calls %v (dials %d), want the BMC asked: %t", bmc.calls, dialer.dials, tc.wantCall)
			}
			if tc.err != "" {
				if !errors.Is(err, ErrPlan) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want ErrPlan naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.Architecture != tc.want {
				t.Errorf("plan architecture %q, want %q", p.Architecture, tc.want)
			}
			// The plan publishes the picked build's blobs.
			var wantBuild *osimage.BootIdentity
			for _, b := range bs {
				if b.Architecture == tc.want {
					wantBuild = b
				}
			}
			uki, _ := wantBuild.Artifact(osimage.KindUKI)
			var text strings.Builder
			if err := p.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text.String(), "/blobs/"+uki.Digest.String()+"/") || !strings.Contains(text.String(), "arch:   "+tc.want+" (") {
				t.Errorf("plan does not boot the %s build (UKI %s) or say so:\n%s", tc.want, uki.Digest, text.String())
			}
		})
	}
}

// TestInstructionSetDoc: docs/boot-driver.md's table is the mapping
// ArchitectureOf applies, row for row.
func TestInstructionSetDoc(t *testing.T) {
	const path = "../docs/boot-driver.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	begin, end := "<!-- instruction sets: checked by boot TestInstructionSetDoc -->\n", "<!-- end of instruction sets -->"
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no instruction set table between %q and %q", path, begin, end)
	}
	var want strings.Builder
	want.WriteString("| InstructionSet | architecture |\n|---|---|\n")
	for _, s := range instructionSets {
		cell := "`" + s.arch + "`"
		if s.arch == "" {
			cell = "none: " + s.why
		}
		fmt.Fprintf(&want, "| `%s` | %s |\n", s.set, cell)
	}
	if got := doc[i+len(begin) : j]; got != want.String() {
		t.Errorf("%s: instruction set table\n got:\n%s\nwant:\n%s", path, got, want.String())
	}
}
