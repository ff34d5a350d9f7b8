package boot

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ironcore-dev/os-builder/osimage"
)

// instructionSets maps the Redfish Processor instruction set values (DMTF
// Processor schema, its instruction set enum) to OCI platform architectures (Go's
// GOARCH spelling, what an image index's platform.architecture says). A
// value mapped to "" is known but names no single OCI architecture; why
// says what is missing.
var instructionSets = []struct {
	set, arch, why string
}{
	{"x86-64", "amd64", ""},
	{"ARM-A64", "arm64", ""},
	{"x86", "386", ""},
	{"ARM-A32", "arm", ""},
	{"RV64", "riscv64", ""},
	{"IA-64", "", "Itanium has no OCI architecture"},
	{"RV32", "", "32-bit RISC-V has no OCI architecture"},
	{"MIPS32", "", "the byte order (mips or mipsle) is not reported"},
	{"MIPS64", "", "the byte order (mips64 or mips64le) is not reported"},
	{"PowerISA", "", "the byte order (ppc64 or ppc64le) is not reported"},
	{"OEM", "", "an OEM instruction set names no architecture"},
}

// ArchitectureOf maps a Redfish instruction set (x86-64, ARM-A64, ...) to the
// OCI platform architecture (amd64, arm64, ...). A value that names no single
// architecture is an error saying why.
func ArchitectureOf(instructionSet string) (string, error) {
	for _, s := range instructionSets {
		if s.set != instructionSet {
			continue
		}
		if s.arch == "" {
			return "", fmt.Errorf("instruction set %s: %s", instructionSet, s.why)
		}
		return s.arch, nil
	}
	return "", fmt.Errorf("unknown instruction set %q (the Redfish schema knows x86-64, ARM-A64, x86, ARM-A32, RV64, IA-64, RV32, MIPS32, MIPS64, PowerISA, OEM)", instructionSet)
}

// Architectures are the OCI platform architectures a server can be
// declared to be (serverboot --arch): Go's GOARCH values for Linux.
var Architectures = []string{"386", "amd64", "arm", "arm64", "loong64", "mips", "mips64", "mips64le", "mipsle", "ppc64", "ppc64le", "riscv64", "s390x"}

// CheckArchitecture refuses an architecture name outside Architectures.
func CheckArchitecture(arch string) error {
	if !slices.Contains(Architectures, arch) {
		return fmt.Errorf("unknown architecture %q (want one of %s)", arch, strings.Join(Architectures, ", "))
	}
	return nil
}

// ServerArch is what is known of the server's architecture and from where.
type ServerArch struct {
	// Arch is the OCI architecture; empty when nothing says.
	Arch string
	// From says where Arch comes from ("--arch", "the BMC's Processors
	// report ARM-A64"), or why it is unknown.
	From string
}

// pickArchitecture chooses the image's build for the server. An image
// whose one build names no architecture boots anywhere (nothing to check,
// said in the plan); a server of unknown architecture gets the image's only
// build and is refused an image with several. Every refusal is ErrPlan and
// names both sides.
func pickArchitecture(image string, builds []*osimage.BootIdentity, server ServerArch) (*osimage.BootIdentity, ServerArch, error) {
	if len(builds) == 0 {
		return nil, server, fmt.Errorf("%w: image %s has no boot manifest", ErrPlan, image)
	}
	if len(builds) == 1 && builds[0].Architecture == "" {
		return builds[0], ServerArch{From: "the image names no architecture: not checked"}, nil
	}
	var archs []string
	for _, b := range builds {
		archs = append(archs, b.Architecture)
	}
	if server.Arch == "" {
		if len(builds) == 1 {
			return builds[0], ServerArch{Arch: builds[0].Architecture, From: "the image's only architecture; " + server.From}, nil
		}
		return nil, server, fmt.Errorf("%w: the server's architecture is unknown (%s) and image %s is built for %v: say which with --arch",
			ErrPlan, server.From, image, archs)
	}
	for _, b := range builds {
		if b.Architecture == server.Arch {
			return b, server, nil
		}
	}
	return nil, server, fmt.Errorf("%w: the server is %s (%s), image %s is built for %v only", ErrPlan, server.Arch, server.From, image, archs)
}
