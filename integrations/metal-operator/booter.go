package metaloperator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"

	metalv1alpha1 "github.com/ironcore-dev/metal-operator/api/v1alpha1"
	"github.com/ironcore-dev/metal-operator/bmc"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/boot/redfish"
	"github.com/ironcore-dev/os-builder/osimage"
)

// Condition types this package adds to the driver's (boot.Condition*: which
// keep their names, NetworkBootedOnce among them).
const (
	// ConditionBootMethodSelected says which method boots and why.
	ConditionBootMethodSelected = "BootMethodSelected"
	// ConditionBootCompleted sums up the run: True once the plan finished,
	// False with the reason it stopped.
	ConditionBootCompleted = "BootCompleted"
	// ConditionArchitectureSelected says which of the image's builds
	// boots and what said the server's architecture.
	ConditionArchitectureSelected = "ArchitectureSelected"
)

// Reasons of a BootCompleted=False condition. The first three do not heal by
// retrying (the ServerBootConfiguration goes to Error); the others do.
const (
	ReasonInvalidObjects    = "InvalidObjects"
	ReasonInvalidPlan       = "InvalidPlan"
	ReasonCapabilityMissing = "CapabilityMissing"
	ReasonTimeout           = "Timeout"
	ReasonBMCError          = "BMCError"
)

// Booter boots metal-operator Servers with os-builder's driver. One Booter
// serves any number of concurrent reconciles.
type Booter struct {
	// Driver runs the plans; its Publisher (an artifacts.Server) serves the
	// artifacts at ArtifactBaseURL. Persist is not used: the state goes
	// into the ServerBootConfiguration (ApplyTo).
	Driver          *boot.Driver
	ArtifactBaseURL string
	// DefaultScheme applies where a BMC protocol names no scheme (https if
	// empty), as metal-operator's --default-protocol-scheme does.
	DefaultScheme metalv1alpha1.ProtocolScheme
	// Images reads an image's builds (one per architecture of an index);
	// nil is boot.Registry{}: the registry with the default keychain,
	// manifests and configs only (boot.RegistryImage).
	Images boot.ImageSource
	// Redfish configures the default Connect, os-builder's Redfish client
	// (auth, retries, TLS); endpoint, credentials and system come from the
	// objects.
	Redfish redfish.Config
	// Connect opens the BMC; the default is os-builder's Redfish client
	// (ConnectRedfish). ConnectMetalOperator uses metal-operator's own
	// client behind Adapter instead. The returned func closes it.
	Connect func(ctx context.Context, t Target) (boot.BMC, func(), error)
}

// Result is what a run observed, ready for metal-operator's status.
type Result struct {
	Conditions []metav1.Condition
	// State is the driver's state after the run (ApplyTo stores it).
	State *boot.State
	Plan  *boot.Plan
}

// Boot resolves the boot the objects describe and runs it. It always returns
// conditions, also with an error (BootCompleted=False says why), so the
// caller can write the status either way and requeue on a retryable error.
func (b *Booter) Boot(ctx context.Context, o Objects) (Result, error) {
	gen := int64(0)
	if o.BootConfig != nil {
		gen = o.BootConfig.Generation
	}
	res := Result{State: &boot.State{}}
	now := time.Now()
	add := func(typ string, status metav1.ConditionStatus, reason, msg string, at time.Time) {
		res.Conditions = append(res.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(at)})
	}
	fail := func(err error) (Result, error) {
		add(ConditionBootCompleted, metav1.ConditionFalse, reasonOf(err), err.Error(), now)
		return res, err
	}
	req, err := ResolveRequest(o)
	if err != nil {
		return fail(err)
	}
	target, err := ResolveTarget(o, b.DefaultScheme)
	if err != nil {
		return fail(err)
	}
	st, err := StateOf(o)
	if err != nil {
		return fail(err)
	}
	res.State = st
	s := &boot.Session{
		Request: boot.Request{Image: req.Image, Method: req.Method, Policy: req.Policy, ArtifactBaseURL: b.ArtifactBaseURL,
			Architecture: req.Architecture, ArchitectureFrom: req.ArchitectureFrom},
		Images: planImages{cmp.Or[boot.ImageSource](b.Images, boot.Registry{})},
		Dialer: targetDialer{b, target},
		Driver: b.Driver,
		// None only powers on: its plan stays the image's whatever the BMC
		// offers, as the states saved in the annotation expect.
		SkipCapabilitiesForNone: true,
	}
	run, err := s.Boot(ctx, st)
	if p := run.Plan; p != nil { // the plan ran
		res.Plan = p
		add(ConditionArchitectureSelected, metav1.ConditionTrue, "Selected", fmt.Sprintf("%s (%s)", cmp.Or(p.Architecture, "any"), p.ArchitectureFrom), now)
		if req.Policy != boot.None {
			why := p.Choice
			if req.Method != "" {
				why = "requested by annotation " + AnnotationBootMethod
			}
			add(ConditionBootMethodSelected, metav1.ConditionTrue, "Selected", fmt.Sprintf("method: %s (%s)", p.Method, why), now)
		}
		for _, c := range st.Conditions {
			add(c.Type, metav1.ConditionStatus(c.Status), c.Reason, c.Message, c.LastTransitionTime)
		}
	}
	if err != nil {
		return fail(err)
	}
	add(ConditionBootCompleted, metav1.ConditionTrue, "PlanCompleted", fmt.Sprintf("%s boot of %s (policy %s)", res.Plan.Method, req.Image, res.Plan.Policy), now)
	return res, nil
}

func reasonOf(err error) string {
	switch {
	case errors.Is(err, ErrObjects), errors.Is(err, boot.ErrInvalidState):
		return ReasonInvalidObjects
	case errors.Is(err, boot.ErrPlan):
		return ReasonInvalidPlan
	case errors.Is(err, boot.ErrCapability):
		return ReasonCapabilityMissing
	case errors.Is(err, boot.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	}
	return ReasonBMCError
}

// maxStateAnnotation bounds the state annotation before it is decoded; a
// real one is a few hundred bytes.
const maxStateAnnotation = 64 << 10

// StateOf is the driver state the objects carry: the ServerBootConfiguration's
// state annotation, and the claim's network-booted mark (which outlives a
// ServerBootConfiguration deleted after a NetworkBootOnce boot).
func StateOf(o Objects) (*boot.State, error) {
	st := &boot.State{}
	if o.BootConfig != nil {
		if v, ok := o.BootConfig.Annotations[AnnotationBootState]; ok {
			if len(v) > maxStateAnnotation {
				return nil, fmt.Errorf("%w: ServerBootConfiguration %s: annotation %s is %d bytes, more than %d",
					boot.ErrInvalidState, o.BootConfig.Name, AnnotationBootState, len(v), maxStateAnnotation)
			}
			s, err := boot.ParseState([]byte(v))
			if err != nil {
				return nil, fmt.Errorf("ServerBootConfiguration %s: annotation %s: %w", o.BootConfig.Name, AnnotationBootState, err)
			}
			st = s
		}
	}
	if o.Claim != nil && o.Claim.Annotations[AnnotationNetworkBooted] == "true" {
		st.NetworkBooted = true
	}
	return st, nil
}

// ApplyTo writes a result into the objects for the controller to update:
// the conditions into the ServerBootConfiguration's status (v0.7.0's
// ServerClaim has no conditions; NetworkBootedOnce is there too), its state
// (Ready, Error for what retrying cannot heal, else Pending), the driver
// state annotation, and the claim's network-booted mark.
func ApplyTo(res Result, sbc *metalv1alpha1.ServerBootConfiguration, claim *metalv1alpha1.ServerClaim) error {
	if sbc != nil {
		for _, c := range res.Conditions {
			meta.SetStatusCondition(&sbc.Status.Conditions, c)
		}
		sbc.Status.State = metalv1alpha1.ServerBootConfigurationStatePending
		if c := meta.FindStatusCondition(sbc.Status.Conditions, ConditionBootCompleted); c != nil {
			switch {
			case c.Status == metav1.ConditionTrue:
				sbc.Status.State = metalv1alpha1.ServerBootConfigurationStateReady
			case c.Reason == ReasonInvalidObjects || c.Reason == ReasonInvalidPlan || c.Reason == ReasonCapabilityMissing:
				sbc.Status.State = metalv1alpha1.ServerBootConfigurationStateError
			}
		}
		if res.State != nil && res.State.PlanDigest != "" {
			b, err := json.Marshal(res.State)
			if err != nil {
				return fmt.Errorf("encoding boot state: %w", err)
			}
			if sbc.Annotations == nil {
				sbc.Annotations = map[string]string{}
			}
			sbc.Annotations[AnnotationBootState] = string(b)
		}
	}
	if claim != nil && res.State != nil && res.State.NetworkBooted {
		if claim.Annotations == nil {
			claim.Annotations = map[string]string{}
		}
		claim.Annotations[AnnotationNetworkBooted] = "true"
	}
	return nil
}

// planImages reads the image's builds as the session's ImageSource. Every
// failure, an unreachable registry too, is ErrPlan: BootCompleted=False
// with InvalidPlan, as it always was here.
type planImages struct{ boot.ImageSource }

func (p planImages) Builds(ctx context.Context, image string) ([]*osimage.BootIdentity, error) {
	builds, err := p.ImageSource.Builds(ctx, image)
	if err != nil && !errors.Is(err, boot.ErrPlan) {
		return nil, fmt.Errorf("%w: image %s: %w", boot.ErrPlan, image, err)
	}
	return builds, err
}

// targetDialer opens the objects' BMC as the session's BMCDialer: with
// Booter.Connect, else os-builder's Redfish client.
type targetDialer struct {
	b *Booter
	t Target
}

func (d targetDialer) DialBMC(ctx context.Context) (boot.BMC, func(), error) {
	connect := d.b.Connect
	if connect == nil {
		connect = func(ctx context.Context, t Target) (boot.BMC, func(), error) {
			return ConnectRedfish(ctx, t, d.b.Redfish)
		}
	}
	c, closeBMC, err := connect(ctx, d.t)
	if err != nil {
		return nil, nil, fmt.Errorf("connecting to BMC %s: %w", d.t, err)
	}
	return c, closeBMC, nil
}

// ConnectRedfish opens os-builder's Redfish client (boot/redfish) on the
// target: every method the BMC offers (UEFI HTTP, virtual media, PXE). The
// system is the one at the Server's spec.systemURI, else the BMC's first.
func ConnectRedfish(ctx context.Context, t Target, cfg redfish.Config) (boot.BMC, func(), error) {
	cfg.Endpoint, cfg.Credentials = t.Endpoint, redfish.Credentials{Username: t.Username, Password: t.Password}
	if t.SystemURI != "" {
		cfg.SystemID = path.Base(t.SystemURI)
	}
	c, err := redfish.Connect(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return c, func() { _ = c.Close() }, nil
}

// ConnectMetalOperator opens metal-operator's own Redfish client and wraps it
// in Adapter; a Target without a system URI gets it from the system whose
// UUID it names.
func ConnectMetalOperator(ctx context.Context, t Target, opts bmc.Options) (boot.BMC, func(), error) {
	opts.Endpoint, opts.Username, opts.Password = t.Endpoint, t.Username, t.Password
	if opts.ResourcePollingInterval == 0 {
		opts.ResourcePollingInterval = time.Second
	}
	if opts.ResourcePollingTimeout == 0 {
		opts.ResourcePollingTimeout = 30 * time.Second
	}
	c, err := bmc.NewRedfishBMCClient(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	uri := t.SystemURI
	if uri == "" {
		systems, err := c.GetSystems(ctx)
		if err != nil {
			c.Logout()
			return nil, nil, err
		}
		for _, s := range systems {
			if s.UUID == t.SystemUUID {
				uri = s.URI
			}
		}
		if uri == "" {
			c.Logout()
			return nil, nil, fmt.Errorf("%w: BMC %s has no system with UUID %q", ErrObjects, t.Endpoint, t.SystemUUID)
		}
	}
	return &Adapter{BMC: c, SystemURI: uri}, c.Logout, nil
}
