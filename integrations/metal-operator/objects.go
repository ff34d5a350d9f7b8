package metaloperator

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	metalv1alpha1 "github.com/ironcore-dev/metal-operator/api/v1alpha1"
	"github.com/ironcore-dev/metal-operator/pkg/bmcutils"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/osimage"
)

// Annotations carrying what metal-operator v0.7.0's types have no field for.
const (
	// AnnotationBootPolicy on the ServerClaim stands in for seed 001's
	// spec.bootPolicy (NetworkBootOnce, NetworkBootAlways, None), which
	// v0.7.0's ServerClaimSpec lacks; absent means NetworkBootOnce.
	AnnotationBootPolicy = "boot.os-builder.ironcore.dev/boot-policy"
	// AnnotationBootMethod on the ServerClaim forces a boot method
	// (uefi-http, pxe, virtual-media, disk); absent means the first of the
	// image's methods the BMC can do.
	AnnotationBootMethod = "boot.os-builder.ironcore.dev/boot-method"
	// AnnotationNetworkBooted on the ServerClaim records that the claim's
	// server network-booted under NetworkBootOnce, so deleting the
	// ServerBootConfiguration afterwards (seed 001) never re-provisions.
	AnnotationNetworkBooted = "boot.os-builder.ironcore.dev/network-booted"
	// AnnotationBootState on the ServerBootConfiguration is the driver's
	// boot.State (JSON): a later reconcile resumes where this one stopped.
	AnnotationBootState = "boot.os-builder.ironcore.dev/state"
)

// ErrObjects marks metal-operator objects that do not say how to boot: a
// missing or mismatched object, an unknown policy, no endpoint.
var ErrObjects = errors.New("metal-operator objects")

// Objects are what a controller has fetched for one boot. Claim may be nil
// (a ServerBootConfiguration without a claim, e.g. maintenance); BMC and
// Endpoint are needed only when the Server refers to them.
type Objects struct {
	Claim      *metalv1alpha1.ServerClaim
	BootConfig *metalv1alpha1.ServerBootConfiguration
	Server     *metalv1alpha1.Server
	BMC        *metalv1alpha1.BMC
	Endpoint   *metalv1alpha1.Endpoint
	Secret     *metalv1alpha1.BMCSecret
}

// Target is where and as whom the BMC is reached, and which system boots.
type Target struct {
	Endpoint   string // scheme://host:port
	Username   string
	Password   string
	SystemURI  string // may be empty: found by SystemUUID
	SystemUUID string
}

// String never shows the password.
func (t Target) String() string {
	return fmt.Sprintf("%s as %s (system %s)", t.Endpoint, t.Username, t.SystemUUID)
}

// GoString never shows the password either (%#v).
func (t Target) GoString() string { return t.String() }

// Request is what the objects ask for.
type Request struct {
	Image  string
	Policy boot.Policy
	Method osimage.BootMethod // empty: chosen by the BMC's capabilities
	// Architecture is the Server's (OCI spelling: amd64, arm64) by its
	// status.processors, ArchitectureFrom which one said so; empty where
	// the status says nothing usable: the BMC's Processors say then.
	Architecture, ArchitectureFrom string
}

// ServerArchitecture is the Server's architecture by what metal-operator
// discovered (status.processors, read from the BMC's Redfish Processors):
// the first CPU (type CPU or unset; FPGAs, GPUs have their own) whose
// instructionSet names an architecture. Empty where none does.
func ServerArchitecture(s *metalv1alpha1.Server) (arch, from string) {
	if s == nil {
		return "", ""
	}
	for _, p := range s.Status.Processors {
		if p.Type != "" && p.Type != "CPU" || p.InstructionSet == "" {
			continue
		}
		if a, err := boot.ArchitectureOf(p.InstructionSet); err == nil {
			return a, fmt.Sprintf("Server %s status.processors[%s].instructionSet %s", s.Name, p.ID, p.InstructionSet)
		}
	}
	return "", ""
}

// ResolveRequest reads the image (ServerBootConfiguration, else ServerClaim),
// the policy and the method (ServerClaim annotations).
func ResolveRequest(o Objects) (Request, error) {
	if o.BootConfig == nil {
		return Request{}, fmt.Errorf("%w: no ServerBootConfiguration", ErrObjects)
	}
	r := Request{Image: o.BootConfig.Spec.Image, Policy: boot.NetworkBootOnce}
	if o.Claim != nil {
		if r.Image == "" {
			r.Image = o.Claim.Spec.Image
		}
		if v, ok := o.Claim.Annotations[AnnotationBootPolicy]; ok {
			r.Policy = boot.Policy(v)
			switch r.Policy {
			case boot.NetworkBootOnce, boot.NetworkBootAlways, boot.None:
			default:
				return Request{}, fmt.Errorf("%w: ServerClaim %s: annotation %s: unknown policy %q (want NetworkBootOnce, NetworkBootAlways or None)",
					ErrObjects, o.Claim.Name, AnnotationBootPolicy, v)
			}
		}
		if v, ok := o.Claim.Annotations[AnnotationBootMethod]; ok {
			r.Method = osimage.BootMethod(v)
			switch r.Method {
			case osimage.BootUEFIHTTP, osimage.BootPXE, osimage.BootVirtualMedia, osimage.BootDisk:
			default:
				return Request{}, fmt.Errorf("%w: ServerClaim %s: annotation %s: unknown boot method %q (want uefi-http, pxe, virtual-media or disk)",
					ErrObjects, o.Claim.Name, AnnotationBootMethod, v)
			}
		}
	}
	if r.Image == "" {
		return Request{}, fmt.Errorf("%w: ServerBootConfiguration %s: spec.image is empty (and no ServerClaim image)", ErrObjects, o.BootConfig.Name)
	}
	r.Architecture, r.ArchitectureFrom = ServerArchitecture(o.Server)
	return r, nil
}

// ResolveTarget finds the BMC endpoint and credentials the way metal-operator
// does: the Server's inline spec.bmc, else its BMC object (inline
// spec.access or the Endpoint it refers to), with the BMCSecret it names.
// defaultScheme applies where the protocol names none (metal-operator's
// --default-protocol-scheme is the caller's to pass).
func ResolveTarget(o Objects, defaultScheme metalv1alpha1.ProtocolScheme) (Target, error) {
	if o.Server == nil {
		return Target{}, fmt.Errorf("%w: no Server", ErrObjects)
	}
	var (
		proto     metalv1alpha1.Protocol
		address   string
		secretRef string
		where     string
	)
	switch {
	case o.Server.Spec.BMC != nil:
		where = "Server " + o.Server.Name + " spec.bmc"
		proto, address, secretRef = o.Server.Spec.BMC.Protocol, o.Server.Spec.BMC.Address, o.Server.Spec.BMC.BMCSecretRef.Name
	case o.Server.Spec.BMCRef != nil:
		if o.BMC == nil || o.BMC.Name != o.Server.Spec.BMCRef.Name {
			return Target{}, fmt.Errorf("%w: Server %s spec.bmcRef names BMC %q; pass that object", ErrObjects, o.Server.Name, o.Server.Spec.BMCRef.Name)
		}
		where = "BMC " + o.BMC.Name
		proto, secretRef = o.BMC.Spec.Protocol, o.BMC.Spec.BMCSecretRef.Name
		switch {
		case o.BMC.Spec.Endpoint != nil && o.BMC.Spec.Endpoint.IP.IsValid():
			address = o.BMC.Spec.Endpoint.IP.String()
		case o.BMC.Spec.EndpointRef != nil:
			if o.Endpoint == nil || o.Endpoint.Name != o.BMC.Spec.EndpointRef.Name {
				return Target{}, fmt.Errorf("%w: BMC %s spec.endpointRef names Endpoint %q; pass that object", ErrObjects, o.BMC.Name, o.BMC.Spec.EndpointRef.Name)
			}
			if !o.Endpoint.Spec.IP.IsValid() {
				return Target{}, fmt.Errorf("%w: Endpoint %s: spec.ip is empty", ErrObjects, o.Endpoint.Name)
			}
			address = o.Endpoint.Spec.IP.String()
		}
	default:
		return Target{}, fmt.Errorf("%w: Server %s has neither spec.bmc nor spec.bmcRef", ErrObjects, o.Server.Name)
	}
	if address == "" {
		return Target{}, fmt.Errorf("%w: %s: no address (access.ip or endpointRef)", ErrObjects, where)
	}
	if proto.Name != metalv1alpha1.ProtocolNameRedfish {
		return Target{}, fmt.Errorf("%w: %s: protocol %q; the boot driver speaks Redfish only", ErrObjects, where, proto.Name)
	}
	if o.Secret == nil || o.Secret.Name != secretRef {
		return Target{}, fmt.Errorf("%w: %s names BMCSecret %q; pass that object", ErrObjects, where, secretRef)
	}
	user, pass, err := bmcutils.GetBMCCredentialsFromSecret(o.Secret)
	if err != nil {
		return Target{}, fmt.Errorf("%w: %w", ErrObjects, err)
	}
	scheme := bmcutils.GetProtocolScheme(proto.Scheme, defaultScheme)
	if scheme == "" {
		scheme = metalv1alpha1.HTTPSProtocolScheme
	}
	host := address
	if proto.Port != 0 {
		host = net.JoinHostPort(address, strconv.Itoa(int(proto.Port)))
	} else if ip := net.ParseIP(address); ip != nil && ip.To4() == nil {
		host = "[" + address + "]"
	}
	return Target{Endpoint: string(scheme) + "://" + host, Username: user, Password: pass,
		SystemURI: o.Server.Spec.SystemURI, SystemUUID: o.Server.Spec.SystemUUID}, nil
}
