package boot

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/ironcore-dev/os-builder/osimage"
)

// ErrRequest marks a request that is wrong on its own, whatever the image
// or the BMC: an unknown policy or method, install flags that contradict
// each other, a malformed artifact server URL. Session finds these before
// any registry or BMC request (serverboot exits 2). It is also ErrPlan, so
// callers that sort plan failures from retryable ones need no new case.
var ErrRequest error = requestError{}

type requestError struct{}

func (requestError) Error() string        { return "boot request" }
func (requestError) Is(target error) bool { return target == ErrPlan }

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
