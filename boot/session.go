package boot

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/osimage"
)

// Session is one boot of one server, in the order every caller needs it:
// check the request (no I/O: a wrong request costs no registry or BMC
// request), read the image's boot identity, plan from the image alone (a
// mismatch costs no BMC call), connect, plan with the BMC's capabilities
// (before any artifact is fetched), serve the artifacts, run the plan.
// serverboot and the metal-operator integration only fill in its fields.
type Session struct {
	// Request is what to boot; Request.Image names the image.
	Request Request
	// Images reads the image's builds; nil is Registry{}.
	Images ImageSource
	// Dialer opens the BMC. Without it Plan plans from the image alone;
	// Boot needs it.
	Dialer BMCDialer
	// Artifacts, if set, serves the plan's artifacts for this boot and
	// supplies Request.ArtifactBaseURL; nil: the request's URL as it is,
	// served by the Driver's Publisher.
	Artifacts ArtifactServer
	// Driver runs the plan. Boot runs a copy (Artifacts.Serve sets the
	// copy's Publisher), so one Driver serves any number of sessions; nil
	// is the zero Driver.
	Driver *Driver
	// Logf, if set, gets the method choice, the plan's notes and the BMC
	// calls that change something (LoggingBMC).
	Logf func(format string, args ...any)
	// SkipCapabilitiesForNone plans policy None (power only) without the
	// BMC's capabilities: the image's method, never refused by the BMC.
	// The metal-operator integration plans None that way (its saved states
	// carry those plans' digests); serverboot checks under every policy.
	SkipCapabilitiesForNone bool
}

// ImageSource reads an image's builds: one boot identity per architecture
// (an index's linux platforms, first manifest per architecture, in the
// index's order; a single manifest is one build).
type ImageSource interface {
	Builds(ctx context.Context, image string) ([]*osimage.BootIdentity, error)
}

// Registry is the default ImageSource: the image's registry
// (RegistryImage). The zero value parses references as name does and uses
// the default keychain.
type Registry struct {
	// Name parses the image reference (name.Insecure: plain HTTP).
	Name []name.Option
	// Remote comes after the default keychain.
	Remote []remote.Option
}

// Builds reads the builds of the image named image; a reference that does
// not parse is ErrRequest, found before any request.
func (r Registry) Builds(ctx context.Context, image string) ([]*osimage.BootIdentity, error) {
	ref, err := name.ParseReference(image, r.Name...)
	if err != nil {
		return nil, fmt.Errorf("%w: image %q: %w", ErrRequest, image, err)
	}
	return RegistryImage(ctx, ref, r.Remote...)
}

// KnownBuilds is an ImageSource of builds read already, whatever the image
// is called: a caller that read the image itself, or tests.
type KnownBuilds []*osimage.BootIdentity

func (b KnownBuilds) Builds(context.Context, string) ([]*osimage.BootIdentity, error) {
	return b, nil
}

// BMCDialer opens the BMC of the server to boot. The returned func closes
// it (nil: nothing to close).
type BMCDialer interface {
	DialBMC(ctx context.Context) (BMC, func(), error)
}

// OpenedBMC is a BMCDialer of a BMC the caller opened already (and
// closes).
type OpenedBMC struct{ BMC BMC }

func (o OpenedBMC) DialBMC(context.Context) (BMC, func(), error) { return o.BMC, nil, nil }

// ArtifactServer serves one boot's artifacts.
type ArtifactServer interface {
	// BaseURL is the base URL the machine reaches the server at
	// (Request.ArtifactBaseURL). It is called before any I/O of the
	// session; its error fails the session only where the boot may go
	// over the network: a disk boot needs no artifact server.
	BaseURL() (string, error)
	// Serve starts serving the plan's artifacts before the BMC is driven
	// (a port in use fails here, not in the firmware) and sets d's
	// Publisher and Evidence. It is called only for plans that publish.
	Serve(ctx context.Context, p *Plan, d *Driver) error
}

// Result is what Boot did.
type Result struct {
	// Plan is the plan Boot ran; nil if Boot failed before running one
	// (the state is then as the caller passed it).
	Plan *Plan
	// Skipped says the state had this boot done already (the plan
	// finished, or the server network-booted once under NetworkBootOnce):
	// nothing on the BMC was changed.
	Skipped bool
}

// ErrBMC marks a session that failed on the BMC's side: connecting,
// reading its capabilities, or running the plan against it. The message
// is the cause's, whose own marks (ErrTimeout, ErrCapability,
// ErrInvalidState) still match.
var ErrBMC = errors.New("BMC failed")

// bmcFailure marks an error as ErrBMC without changing its message.
type bmcFailure struct{ error }

func (e bmcFailure) Unwrap() error        { return e.error }
func (e bmcFailure) Is(target error) bool { return target == ErrBMC }

// Plan plans the boot without changing anything: from the image alone, or,
// with a Dialer, with what the BMC offers (read-only calls). It is the
// plan Boot would run.
func (s *Session) Plan(ctx context.Context) (*Plan, error) {
	r, p, err := s.resolve(ctx)
	if err != nil || s.Dialer == nil {
		return p, err
	}
	bmc, closeBMC, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer closeBMC()
	return s.planFor(ctx, bmc, r)
}

// Boot boots the server: it plans as Plan does, serves the plan's
// artifacts (Artifacts.Serve) and runs the plan from where st says it stopped. st is
// updated in place, also when Boot fails; the caller persists it (or sets
// Driver.Persist).
func (s *Session) Boot(ctx context.Context, st *State) (Result, error) {
	if s.Dialer == nil {
		return Result{}, fmt.Errorf("%w: no BMC: Boot needs a Dialer", ErrRequest)
	}
	if st == nil {
		st = &State{}
	}
	r, _, err := s.resolve(ctx)
	if err != nil {
		return Result{}, err
	}
	bmc, closeBMC, err := s.connect(ctx)
	if err != nil {
		return Result{}, err
	}
	defer closeBMC()
	p, err := s.planFor(ctx, bmc, r)
	if err != nil {
		return Result{}, err
	}
	if s.Logf != nil {
		s.Logf("arch %s (%s)", cmp.Or(p.Architecture, "any"), p.ArchitectureFrom)
		if p.Choice != "" {
			s.Logf("method %s (%s)", p.Method, p.Choice)
		}
		for _, n := range p.Notes {
			s.Logf("note: %s", n)
		}
		for _, b := range r.builds {
			if b.Preferred != "" && (b.Architecture == p.Architecture || len(r.builds) == 1) {
				s.Logf("image: %s", b.Preferred)
			}
		}
		bmc = LoggingBMC{BMC: bmc, Logf: s.Logf}
	}
	var d Driver
	if s.Driver != nil {
		d = *s.Driver
	}
	if s.Artifacts != nil && p.publishes() {
		if err := s.Artifacts.Serve(ctx, p, &d); err != nil {
			return Result{}, err
		}
	}
	// Decided before Run, which leaves a finished state as it is.
	finished := st.PlanDigest == p.Digest() && st.Done >= len(p.Steps) && p.Policy != NetworkBootAlways
	if err := d.Run(ctx, bmc, p, st); err != nil {
		return Result{Plan: p}, bmcFailure{err}
	}
	// Done stays 0 when NetworkBootOnce refused to boot the image again.
	return Result{Plan: p, Skipped: finished || st.Done == 0}, nil
}

// resolved is what the image side of a session settled: the image's
// builds, the request the BMC-side plan starts from, and the build picked
// for the server (nil while the BMC is to say the server's architecture).
type resolved struct {
	builds []*osimage.BootIdentity
	req    Request
	id     *osimage.BootIdentity
	arch   ServerArch
}

// resolve checks the request, reads the image and plans from it alone:
// every request-side mistake surfaces before any I/O, every image-side
// mismatch before any BMC call. Where the caller names the server's
// architecture, or there is no BMC to ask, the build is picked here too
// (an image without it is refused before connecting); else every build
// must plan, and planFor picks by what the BMC reports. The plan is the
// picked build's (nil when the BMC is still to say).
func (s *Session) resolve(ctx context.Context) (*resolved, *Plan, error) {
	r := &resolved{req: s.Request}
	var baseErr error
	if s.Artifacts != nil && r.req.policy() != None && r.req.Method != osimage.BootDisk {
		// Auto on a disk-default image may still pick a network method on
		// a BMC without Hdd: then the URL is needed, if there is one.
		r.req.ArtifactBaseURL, baseErr = s.Artifacts.BaseURL()
	}
	if err := r.req.Validate(); err != nil {
		return nil, nil, err
	}
	if baseErr != nil && r.req.networkBoot() {
		return nil, nil, baseErr
	}
	images := s.Images
	if images == nil {
		images = Registry{}
	}
	var err error
	if r.builds, err = images.Builds(ctx, r.req.Image); err != nil {
		return nil, nil, err
	}
	if baseErr != nil && slices.ContainsFunc(r.builds, func(id *osimage.BootIdentity) bool { return mayNetworkBoot(id, r.req) }) {
		return nil, nil, baseErr
	}
	if r.req.Architecture != "" || s.Dialer == nil || len(r.builds) == 1 && r.builds[0].Architecture == "" {
		server := ServerArch{Arch: r.req.Architecture, From: cmp.Or(r.req.ArchitectureFrom, "the caller")}
		if r.req.Architecture == "" {
			server.From = "no BMC asked"
		}
		if r.id, r.arch, err = pickArchitecture(r.req.Image, r.builds, server); err != nil {
			return nil, nil, err
		}
		p, err := Resolve(r.id, r.req)
		if err != nil {
			return nil, nil, err
		}
		r.arch.plan(p)
		return r, p, nil
	}
	for _, id := range r.builds {
		if _, err := Resolve(id, r.req); err != nil {
			if len(r.builds) == 1 {
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("%s build: %w", id.Architecture, err)
		}
	}
	return r, nil, nil
}

// plan records the architecture in a plan.
func (a ServerArch) plan(p *Plan) {
	p.Architecture, p.ArchitectureFrom = a.Arch, a.From
}

// mayNetworkBoot says whether a request (policy other than None, method
// other than disk) may boot over the network: a forced method, an image
// that prefers one, or an install mode that fetches from the artifact
// server.
func mayNetworkBoot(id *osimage.BootIdentity, req Request) bool {
	auto := req.Method == "" || req.Method == MethodAuto
	fetches := req.Install.RootURL || req.Install.Mode == osimage.InstallDisk
	return !auto || id.Default != osimage.BootDisk || fetches
}

// planFor re-plans with what the BMC offers: the server's architecture
// picks the image's build where resolve left that open, auto chooses the
// method by the BMC's capabilities, a forced method the BMC cannot do is
// refused. All of it before any change on the BMC.
func (s *Session) planFor(ctx context.Context, bmc BMC, r *resolved) (*Plan, error) {
	skipCaps := s.SkipCapabilitiesForNone && r.req.Policy == None
	var caps *Capabilities
	if !skipCaps || r.id == nil {
		c, err := bmc.Capabilities(ctx)
		if err != nil {
			return nil, bmcFailure{fmt.Errorf("reading BMC capabilities: %w", err)}
		}
		caps = &c
	}
	id, arch := r.id, r.arch
	if id == nil {
		var err error
		if id, arch, err = pickArchitecture(r.req.Image, r.builds, ServerArchFromBMC(caps.InstructionSet)); err != nil {
			return nil, err
		}
	}
	if skipCaps {
		caps = nil
	}
	p, err := ResolveFor(id, r.req, caps)
	if err != nil {
		return nil, err
	}
	arch.plan(p)
	return p, nil
}

func (s *Session) connect(ctx context.Context) (BMC, func(), error) {
	bmc, closeBMC, err := s.Dialer.DialBMC(ctx)
	if err != nil {
		return nil, nil, bmcFailure{err}
	}
	if closeBMC == nil {
		closeBMC = func() {}
	}
	return bmc, closeBMC, nil
}

// publishes says whether the plan has artifacts to serve.
func (p *Plan) publishes() bool {
	for _, s := range p.Steps {
		if s.Kind == StepPublishArtifacts {
			return true
		}
	}
	return false
}

// maxIndexManifests bounds the manifests of an image index read: a real
// one has a few per architecture.
const maxIndexManifests = 256

// RegistryImage reads the builds of the image ref names from its registry
// (manifests and configs, not the layers), with the default keychain; opts
// come after those. An index gives one build per linux platform
// architecture, read from the manifests for it (osimage.ReadIndexIdentity:
// the first v1 manifest, as boot-operator picks, and the IronCore Image V2
// kinds, preferred where they map one to one; entries without a platform, "unknown" ones such as attestations, other OSes and
// nested indexes are skipped); a manifest whose architecture annotation
// disagrees with its index entry is refused. A single manifest is one
// build. Errors are classified as RegistryIdentity's.
func RegistryImage(ctx context.Context, ref name.Reference, opts ...remote.Option) ([]*osimage.BootIdentity, error) {
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("fetching image %s: %w", ref, err)
	}
	if !desc.MediaType.IsIndex() {
		img, err := desc.Image()
		if err != nil {
			return nil, fmt.Errorf("fetching image %s: %w", ref, err)
		}
		id, err := identityOf(ref, img)
		if err != nil {
			return nil, err
		}
		return []*osimage.BootIdentity{id}, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("fetching image index %s: %w", ref, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading image index %s: %w", ref, err)
	}
	if len(im.Manifests) > maxIndexManifests {
		return nil, fmt.Errorf("%w: image index %s has %d manifests, more than %d", ErrPlan, ref, len(im.Manifests), maxIndexManifests)
	}
	var builds []*osimage.BootIdentity
	for _, d := range im.Manifests {
		pl := d.Platform
		if pl == nil || pl.Architecture == "" || pl.Architecture == "unknown" || (pl.OS != "" && pl.OS != "linux") || !d.MediaType.IsImage() ||
			slices.ContainsFunc(builds, func(b *osimage.BootIdentity) bool { return b.Architecture == pl.Architecture }) {
			continue
		}
		// Every manifest of the architecture: v1, IronCore Image V2, or
		// both (V2 preferred where it maps one to one: id.Preferred).
		id, err := osimage.ReadIndexIdentity(idx, pl.Architecture)
		if err != nil {
			if c := exitcode.Of(err); c == exitcode.Unavailable || c == exitcode.Timeout {
				return nil, fmt.Errorf("reading the %s manifests of %s: %w", pl.Architecture, ref, err)
			}
			return nil, fmt.Errorf("%w: image %s: %w", ErrPlan, ref, err)
		}
		if id.Architecture != "" && id.Architecture != pl.Architecture {
			return nil, fmt.Errorf("%w: image index %s: entry %s has platform architecture %s, its manifest says %s (%s)",
				ErrPlan, ref, d.Digest, pl.Architecture, id.Architecture, osimage.AnnotationArchitecture)
		}
		id.Architecture = pl.Architecture
		builds = append(builds, id)
	}
	if len(builds) == 0 {
		return nil, fmt.Errorf("%w: image index %s has no manifest for a linux platform architecture (%d entries)", ErrPlan, ref, len(im.Manifests))
	}
	return builds, nil
}

// identityOf reads an image's boot identity; a registry that fails or
// times out is no mismatch, anything else is ErrPlan.
func identityOf(ref name.Reference, img v1.Image) (*osimage.BootIdentity, error) {
	id, err := osimage.ReadIdentity(img)
	if err != nil {
		if c := exitcode.Of(err); c == exitcode.Unavailable || c == exitcode.Timeout {
			return nil, fmt.Errorf("reading image %s: %w", ref, err)
		}
		return nil, fmt.Errorf("%w: image %s: %w", ErrPlan, ref, err)
	}
	return id, nil
}

// RegistryIdentity reads the boot identity of the image ref names from its
// registry (manifest and config, not the layers), with the default
// keychain; opts come after those. A registry that fails or times out is
// no mismatch, as retrying may help; an image that is not a bootable
// os-builder image is ErrPlan.
func RegistryIdentity(ctx context.Context, ref name.Reference, opts ...remote.Option) (*osimage.BootIdentity, error) {
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	img, err := remote.Image(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("fetching image %s: %w", ref, err)
	}
	return identityOf(ref, img)
}
