package boot

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/ironcore-dev/os-builder/osimage"
)

// Policy says when a server network-boots, after the metal-operator
// discussion on spec.bootPolicy.
type Policy string

const (
	// NetworkBootOnce boots the image once; afterwards every boot and reset
	// goes to disk and the server is never re-provisioned by this state.
	NetworkBootOnce Policy = "NetworkBootOnce"
	// NetworkBootAlways sets a one-time override before every boot the
	// caller drives; the caller re-runs the plan for each boot.
	NetworkBootAlways Policy = "NetworkBootAlways"
	// None sets no boot override at all: only the power action.
	None Policy = "None"
)

// Request is what the caller asks for.
type Request struct {
	// Image names the image in the plan and in messages
	// (e.g. registry/repo@sha256:...).
	Image string `json:"image,omitempty"`
	// Method forces a boot method; empty or MethodAuto takes the image's
	// methods in its order of preference and picks the first the BMC
	// allows (ResolveFor), or the image's default when the BMC is not
	// asked (Resolve). A forced method refuses rather than falls back.
	Method osimage.BootMethod `json:"method,omitempty"`
	// Policy defaults to NetworkBootOnce.
	Policy Policy `json:"policy,omitempty"`
	// ArtifactBaseURL is where the server fetches artifacts: the artifact
	// server's advertised base URL (e.g. http://10.0.0.5:8080).
	ArtifactBaseURL string `json:"artifactBaseURL,omitempty"`
	// Install says what the booted initrd does; the zero value runs the OS
	// from memory with the root image inside the initrd (today's boots).
	Install Install `json:"install,omitempty"`
	// Architecture is the server's OCI architecture (amd64, arm64) where
	// the caller knows it (serverboot --arch, a metal-operator Server's
	// status); ArchitectureFrom says from where. Empty: the BMC's
	// Processors say (Session). It picks the image's build.
	Architecture     string `json:"architecture,omitempty"`
	ArchitectureFrom string `json:"architectureFrom,omitempty"`
}

// Install is what the booted initrd's init does with the OS, passed on the
// kernel command line (docs/cmdline.md). Modes other than the default need a
// command line of the driver's making, so they boot via pxe (iPXE script,
// kernel + the initrd without root image): the UKI's and the ISO's command
// lines are fixed when the image is built.
type Install struct {
	// Mode is memory (default) or disk: write the image's disk image to
	// Target, then reboot into it (osb.mode=install).
	Mode osimage.InstallMode `json:"mode,omitempty"`
	// Target is the osb.install.target selector (by-id:ID, serial:S,
	// path:/dev/NAME, size:MIN-MAX); required for disk, never guessed.
	Target string `json:"target,omitempty"`
	// Wipe allows overwriting a foreign partition table (osb.install.wipe=1).
	Wipe bool `json:"wipe,omitempty"`
	// RootURL (memory mode) fetches the root image from the artifact server
	// (osb.root=URL, verified by its digest) instead of carrying it in the
	// initrd: a ~10 MB initrd instead of one holding the whole root.
	RootURL bool `json:"rootURL,omitempty"`
}

// MethodAuto asks for capability-driven method choice (the default).
const MethodAuto osimage.BootMethod = "auto"

// String says what the installer does, for plans and messages.
func (in *Install) String() string {
	switch {
	case in.Mode == osimage.InstallDisk && in.Wipe:
		return "disk (target " + in.Target + ", wipe allowed)"
	case in.Mode == osimage.InstallDisk:
		return "disk (target " + in.Target + ")"
	case in.RootURL:
		return "memory, root image fetched by URL"
	}
	return "memory"
}

// methods are the methods a request may force, and auto.
var methods = []osimage.BootMethod{MethodAuto, osimage.BootUEFIHTTP, osimage.BootPXE, osimage.BootVirtualMedia, osimage.BootDisk}

// Validate checks what the request says on its own, without the image or
// the BMC: the policy, the method, the install mode and its flags, the
// architecture, and the artifact server URL where one is set. The error is
// ErrRequest.
func (r Request) Validate() error {
	if err := r.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrRequest, err)
	}
	return nil
}

func (r Request) validate() error {
	policy := r.policy()
	if !slices.Contains([]Policy{NetworkBootOnce, NetworkBootAlways, None}, policy) {
		return fmt.Errorf("unknown policy %q (want NetworkBootOnce, NetworkBootAlways or None)", policy)
	}
	if r.Method != "" && !slices.Contains(methods, r.Method) {
		return fmt.Errorf("unknown boot method %q (want auto, uefi-http, pxe, virtual-media or disk)", r.Method)
	}
	if r.Architecture != "" {
		if err := CheckArchitecture(r.Architecture); err != nil {
			return err
		}
	}
	if err := r.Install.validate(); err != nil {
		return err
	}
	if in := r.install(); in != nil {
		if m := r.forced(); m != "" && m != osimage.BootPXE {
			return fmt.Errorf("install mode %s boots via pxe only (got method %s): %s", in, m, fixedCmdline(m))
		}
		if policy == None {
			return fmt.Errorf("install mode %s needs a network boot of the driver's making; policy None sets no boot override", in)
		}
	}
	if r.ArtifactBaseURL != "" {
		if _, err := artifactBase(r.ArtifactBaseURL); err != nil {
			return err
		}
	}
	return nil
}

// policy is the request's policy, NetworkBootOnce where it names none.
func (r Request) policy() Policy {
	if r.Policy == "" {
		return NetworkBootOnce
	}
	return r.Policy
}

// forced is the method the request forces; "" for auto.
func (r Request) forced() osimage.BootMethod {
	if r.Method == MethodAuto {
		return ""
	}
	return r.Method
}

// install is the request's install mode where it is not the default
// (memory, root inside the initrd); nil for the default.
func (r Request) install() *Install {
	in := r.Install
	if in.Mode == "" {
		in.Mode = osimage.InstallMemory
	}
	if in.Mode == osimage.InstallMemory && !in.RootURL {
		return nil
	}
	return &in
}

// networkBoot says whether the request alone makes the boot go over the
// network, whatever the image: a forced network method or an install mode
// that fetches from the artifact server, under a policy that boots.
func (r Request) networkBoot() bool {
	if r.policy() == None {
		return false
	}
	m := r.forced()
	return m != "" && m != osimage.BootDisk || r.install() != nil
}

// validate checks the install flags against each other.
func (in Install) validate() error {
	switch in.Mode {
	case "", osimage.InstallMemory:
		if in.Target != "" || in.Wipe {
			return fmt.Errorf("install target and wipe apply to install mode disk only")
		}
	case osimage.InstallDisk:
		if in.RootURL {
			return fmt.Errorf("root by URL applies to install mode memory only")
		}
		if in.Target == "" {
			return fmt.Errorf("install mode disk needs a target disk selector (by-id:, serial:, path:, size:); the installer never picks a disk itself")
		}
		if strings.ContainsFunc(in.Target, func(r rune) bool { return r <= ' ' || r == '"' || r == '\'' || r == 0x7f }) {
			return fmt.Errorf("install target %q must be one kernel command line word (no spaces, quotes or control characters)", in.Target)
		}
	default:
		return fmt.Errorf("unknown install mode %q (want memory or disk)", in.Mode)
	}
	return nil
}

// artifactBase parses an artifact server base URL.
func artifactBase(s string) (*url.URL, error) {
	base, err := url.Parse(strings.TrimSuffix(s, "/"))
	if err != nil {
		// Most often an IPv6 literal without brackets.
		return nil, fmt.Errorf("artifact server URL %q: %w (IPv6 literals go in brackets: http://[fd00::1]:8080)", s, err)
	}
	if (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("artifact server URL %q is not an http(s) URL", s)
	}
	return base, nil
}

// fixedCmdline says why a method cannot carry the installer's parameters.
func fixedCmdline(m osimage.BootMethod) string {
	switch m {
	case osimage.BootUEFIHTTP:
		return "the UKI's command line is sealed into it at build time"
	case osimage.BootVirtualMedia:
		return "the ISO's command line is fixed at build time"
	case osimage.BootDisk:
		return "a disk boot boots what is installed"
	}
	return "only an iPXE script carries a command line of the driver's making"
}
