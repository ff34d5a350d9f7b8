package boot

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/osimage"
)

// Session is one boot of one server, in the order every caller needs it:
// read the image's boot identity, plan from the image alone (a mismatch
// costs no BMC call), connect, plan with the BMC's capabilities (before any
// artifact is fetched), serve the artifacts, run the plan. serverboot and
// the metal-operator integration only fill in its fields.
type Session struct {
	// Request is what to boot; Request.Image names the image.
	Request Request
	// ReadIdentity reads the image's boot identity; nil reads
	// Request.Image from its registry (RegistryIdentity).
	ReadIdentity func(ctx context.Context, image string) (*osimage.BootIdentity, error)
	// ArtifactBaseURL, if set, supplies Request.ArtifactBaseURL once the
	// image is known. Its error fails the session only where the boot may
	// go over the network: a disk boot needs no artifact server.
	ArtifactBaseURL func() (string, error)
	// Connect opens the BMC and returns how to close it. Without it Plan
	// plans from the image alone; Boot needs it.
	Connect func(ctx context.Context) (BMC, func(), error)
	// Serve, if set, starts serving a plan's artifacts before the BMC is
	// driven (a port in use fails here, not in the firmware) and sets d's
	// Publisher and Evidence. It is called only for plans that publish.
	Serve func(ctx context.Context, p *Plan, d *Driver) error
	// Driver runs the plan. Boot runs a copy (Serve sets the copy's
	// Publisher), so one Driver serves any number of sessions; nil is the
	// zero Driver.
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
// with Connect set, with what the BMC offers (read-only calls). It is the
// plan Boot would run.
func (s *Session) Plan(ctx context.Context) (*Plan, error) {
	id, req, p, err := s.resolve(ctx)
	if err != nil || s.Connect == nil {
		return p, err
	}
	bmc, closeBMC, err := s.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer closeBMC()
	return s.planFor(ctx, bmc, id, req)
}

// Boot boots the server: it plans as Plan does, serves the plan's
// artifacts (Serve) and runs the plan from where st says it stopped. st is
// updated in place, also when Boot fails; the caller persists it (or sets
// Driver.Persist).
func (s *Session) Boot(ctx context.Context, st *State) (Result, error) {
	if s.Connect == nil {
		return Result{}, errors.New("boot session: no Connect: Boot needs a BMC")
	}
	if st == nil {
		st = &State{}
	}
	id, req, _, err := s.resolve(ctx)
	if err != nil {
		return Result{}, err
	}
	bmc, closeBMC, err := s.connect(ctx)
	if err != nil {
		return Result{}, err
	}
	defer closeBMC()
	p, err := s.planFor(ctx, bmc, id, req)
	if err != nil {
		return Result{}, err
	}
	if s.Logf != nil {
		if p.Choice != "" {
			s.Logf("method %s (%s)", p.Method, p.Choice)
		}
		for _, n := range p.Notes {
			s.Logf("note: %s", n)
		}
		bmc = LoggingBMC{BMC: bmc, Logf: s.Logf}
	}
	var d Driver
	if s.Driver != nil {
		d = *s.Driver
	}
	if s.Serve != nil && p.publishes() {
		if err := s.Serve(ctx, p, &d); err != nil {
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

// resolve reads the image and plans from it alone: every image-side
// mismatch surfaces here, before any BMC call. It returns the request the
// BMC-side plan starts from.
func (s *Session) resolve(ctx context.Context) (*osimage.BootIdentity, Request, *Plan, error) {
	req := s.Request
	read := s.ReadIdentity
	if read == nil {
		read = registryIdentity
	}
	id, err := read(ctx, req.Image)
	if err != nil {
		return nil, req, nil, err
	}
	if s.ArtifactBaseURL != nil && req.Policy != None && req.Method != osimage.BootDisk {
		base, err := s.ArtifactBaseURL()
		if err != nil && mayNetworkBoot(id, req) {
			return nil, req, nil, err
		}
		// Auto on a disk-default image may still pick a network method on a
		// BMC without Hdd: then the URL is needed, if there is one.
		req.ArtifactBaseURL = base
	}
	p, err := Resolve(id, req)
	return id, req, p, err
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

// planFor re-plans with what the BMC offers: auto chooses by it, a forced
// method the BMC cannot do is refused.
func (s *Session) planFor(ctx context.Context, bmc BMC, id *osimage.BootIdentity, req Request) (*Plan, error) {
	if s.SkipCapabilitiesForNone && req.Policy == None {
		return ResolveFor(id, req, nil)
	}
	caps, err := bmc.Capabilities(ctx)
	if err != nil {
		return nil, bmcFailure{fmt.Errorf("reading BMC capabilities: %w", err)}
	}
	return ResolveFor(id, req, &caps)
}

func (s *Session) connect(ctx context.Context) (BMC, func(), error) {
	bmc, closeBMC, err := s.Connect(ctx)
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

func registryIdentity(ctx context.Context, image string) (*osimage.BootIdentity, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return nil, fmt.Errorf("%w: image %q: %w", ErrPlan, image, err)
	}
	return RegistryIdentity(ctx, ref)
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
	id, err := osimage.ReadIdentity(img)
	if err != nil {
		if c := exitcode.Of(err); c == exitcode.Unavailable || c == exitcode.Timeout {
			return nil, fmt.Errorf("reading image %s: %w", ref, err)
		}
		return nil, fmt.Errorf("%w: image %s: %w", ErrPlan, ref, err)
	}
	return id, nil
}
