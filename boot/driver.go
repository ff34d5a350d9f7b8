package boot

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"
)

// Publisher makes a plan's artifacts and scripts available on the artifact
// server (boot/artifacts.Server implements it). A nil Publisher means the
// artifacts are served elsewhere already.
type Publisher interface {
	Publish(ctx context.Context, artifacts []PublishedArtifact, scripts []Script) error
}

// EvidenceFunc blocks until the caller has evidence the server booted what
// the plan meant (a console line, a phone-home, an OnBoot event) or ctx ends.
// Only evidence of this attempt counts: what happened at or after since,
// when the attempt's power action was issued (State.AttemptStarted).
type EvidenceFunc func(ctx context.Context, p *Plan, since time.Time) error

// Driver executes plans against BMCs. One Driver serves any number of
// concurrent runs; it keeps no per-server state (State does).
type Driver struct {
	Publisher Publisher
	// Evidence is optional; without it the boot counts as done once the
	// power action was accepted.
	Evidence        EvidenceFunc
	EvidenceTimeout time.Duration // default 10 minutes
	MediaTimeout    time.Duration // wait for Inserted=true; default 2 minutes
	PollInterval    time.Duration // default 1 second
	// Persist, if set, is called after every step so a crash loses at most
	// the step in flight.
	Persist func(*State) error
	Now     func() time.Time
}

// Run executes the plan from where st says it stopped. st is updated in
// place (steps done, conditions); the caller persists it.
func (d *Driver) Run(ctx context.Context, bmc BMC, p *Plan, st *State) error {
	// A state from a file is outside input: indexing the plan with it must
	// not panic, and a count beyond the plan must not pass for "finished".
	if err := st.Validate(p); err != nil {
		return err
	}
	digest := p.Digest()
	if st.PlanDigest != digest {
		networkBooted := st.NetworkBooted
		*st = State{PlanDigest: digest, NetworkBooted: networkBooted, Conditions: st.Conditions}
	}
	if st.NetworkBooted && p.Policy == NetworkBootOnce && st.Done == 0 {
		// Never re-provision under NetworkBootOnce: the server booted the
		// image once, later boots are disk boots.
		st.SetCondition(Condition{Type: ConditionNetworkBootedOnce, Status: ConditionTrue, Reason: "AlreadyNetworkBooted",
			Message: "network boot was performed once; not booting the image again"}, d.now())
		return d.persist(st)
	}
	if st.Done >= len(p.Steps) && p.Policy != NetworkBootAlways {
		return nil
	}
	if st.Done >= len(p.Steps) {
		st.Done = 0 // NetworkBootAlways: every run is a new boot
	}
	var caps *Capabilities
	for st.Done < len(p.Steps) {
		step := p.Steps[st.Done]
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("step %d (%s): %w", st.Done+1, step.Kind, err)
		}
		if err := d.runStep(ctx, bmc, p, step, st, &caps); err != nil {
			return fmt.Errorf("step %d (%s): %w", st.Done+1, step.Kind, err)
		}
		st.Done++
		if err := d.persist(st); err != nil {
			return err
		}
	}
	return nil
}

func (d *Driver) runStep(ctx context.Context, bmc BMC, p *Plan, s Step, st *State, caps **Capabilities) error {
	now := d.now()
	switch s.Kind {
	case StepPublishArtifacts:
		if d.Publisher != nil {
			if err := d.Publisher.Publish(ctx, s.Artifacts, s.Scripts); err != nil {
				return fmt.Errorf("publishing artifacts: %w", err)
			}
		}
		st.SetCondition(Condition{Type: ConditionArtifactsPublished, Status: ConditionTrue, Reason: "Published",
			Message: fmt.Sprintf("%d artifacts, %d scripts", len(s.Artifacts), len(s.Scripts))}, now)
	case StepCheckCapability:
		c, err := d.capabilities(ctx, bmc, caps)
		if err != nil {
			return err
		}
		if err := c.check(s.RequireTarget, s.RequireVirtualMedia); err != nil {
			return fmt.Errorf("%s boot: %w", p.Method, err)
		}
	case StepEjectMedia:
		if err := bmc.EjectMedia(ctx); err != nil {
			return err
		}
	case StepInsertMedia:
		if err := bmc.InsertMedia(ctx, s.MediaImage); err != nil {
			return err
		}
	case StepWaitMedia:
		if err := d.waitMedia(ctx, bmc, s.MediaImage); err != nil {
			return err
		}
		st.SetCondition(Condition{Type: ConditionMediaInserted, Status: ConditionTrue, Reason: "Inserted", Message: s.MediaImage}, now)
	case StepSetOverride:
		if err := bmc.SetBootOverride(ctx, *s.Override); err != nil {
			return err
		}
		st.SetCondition(Condition{Type: ConditionOverrideSet, Status: ConditionTrue, Reason: "Set",
			Message: fmt.Sprintf("%s %s", s.Override.Target, s.Override.Enabled)}, now)
	case StepPower:
		return d.power(ctx, bmc, p, st)
	case StepWaitEvidence:
		if d.Evidence == nil {
			st.SetCondition(Condition{Type: ConditionBooted, Status: ConditionUnknown, Reason: "NoEvidenceSource",
				Message: "power action accepted; no evidence source configured"}, now)
			return nil
		}
		since := st.AttemptStarted
		if since.IsZero() {
			// A state saved before attempts were recorded: this run's
			// evidence only.
			since = time.Now()
		}
		ectx, cancel := context.WithTimeout(ctx, cmp.Or(max(d.EvidenceTimeout, 0), 10*time.Minute))
		defer cancel()
		if err := d.Evidence(ectx, p, since); err != nil {
			st.SetCondition(Condition{Type: ConditionBooted, Status: ConditionFalse, Reason: "NoEvidence", Message: err.Error()}, d.now())
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				return fmt.Errorf("%w waiting for boot evidence: %w", ErrTimeout, err)
			}
			return fmt.Errorf("waiting for boot evidence: %w", err)
		}
		st.SetCondition(Condition{Type: ConditionBooted, Status: ConditionTrue, Reason: "EvidenceSeen", Message: string(p.Method)}, d.now())
	case StepPinDisk:
		c, err := d.capabilities(ctx, bmc, caps)
		if err != nil {
			return err
		}
		o := *s.Override
		msg := "later boots go to disk (Hdd Continuous)"
		if !c.ContinuousSupported {
			// The BMC cannot keep an override: clear it, so the BIOS boot
			// order (disk) applies, also on BMCs that treat Once as forever.
			o = Override{Target: TargetNone, Enabled: EnabledDisabled}
			msg = "BMC does not support Continuous; override cleared, later boots follow the BIOS boot order"
		}
		if err := bmc.SetBootOverride(ctx, o); err != nil {
			return err
		}
		st.SetCondition(Condition{Type: ConditionDiskPinned, Status: ConditionTrue, Reason: "Pinned", Message: msg}, now)
	default:
		return fmt.Errorf("unknown step kind %q", s.Kind)
	}
	return nil
}

// power turns the server on, or force-restarts it if it is on. Before that it
// re-checks the override: on a resumed run a reboot in between may have used
// up the Once override, and booting without it would boot the wrong thing.
func (d *Driver) power(ctx context.Context, bmc BMC, p *Plan, st *State) error {
	if want := p.override(); want != nil {
		got, err := bmc.BootOverride(ctx)
		if err != nil {
			return err
		}
		if got.Target != want.Target || got.Enabled == EnabledDisabled || (want.HTTPBootURI != "" && got.HTTPBootURI != want.HTTPBootURI) {
			if err := bmc.SetBootOverride(ctx, *want); err != nil {
				return fmt.Errorf("re-applying override: %w", err)
			}
		}
	}
	ps, err := bmc.PowerState(ctx)
	if err != nil {
		return err
	}
	action := "On"
	if ps != "Off" {
		action = "ForceRestart"
	}
	// The attempt starts before the reset: the machine may fetch before the
	// BMC answers. The wall clock, not d.Now: the artifact server stamps
	// its GETs with it, and a resumed run compares across processes.
	st.AttemptStarted = time.Now()
	if err := bmc.Reset(ctx, action); err != nil {
		return err
	}
	now := d.now()
	st.SetCondition(Condition{Type: ConditionPowerActionIssued, Status: ConditionTrue, Reason: action, Message: "power state was " + ps}, now)
	if p.Policy == NetworkBootOnce && p.Method != "disk" {
		st.NetworkBooted = true
		st.SetCondition(Condition{Type: ConditionNetworkBootedOnce, Status: ConditionTrue, Reason: "NetworkBootPerformed",
			Message: fmt.Sprintf("%s boot performed once", p.Method)}, now)
	}
	return nil
}

// override is the plan's one-time override, nil under policy None.
func (p *Plan) override() *Override {
	for _, s := range p.Steps {
		if s.Kind == StepSetOverride {
			return s.Override
		}
	}
	return nil
}

func (d *Driver) capabilities(ctx context.Context, bmc BMC, caps **Capabilities) (Capabilities, error) {
	if *caps == nil {
		c, err := bmc.Capabilities(ctx)
		if err != nil {
			return Capabilities{}, err
		}
		*caps = &c
	}
	return **caps, nil
}

func (d *Driver) waitMedia(ctx context.Context, bmc BMC, image string) error {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(max(d.MediaTimeout, 0), 2*time.Minute))
	defer cancel()
	for {
		m, err := bmc.Media(ctx)
		if err == nil && m.Inserted && m.Image == image {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: virtual media not inserted: %s", ErrTimeout, image)
		case <-time.After(cmp.Or(max(d.PollInterval, 0), time.Second)):
		}
	}
}

func (d *Driver) persist(st *State) error {
	if d.Persist == nil {
		return nil
	}
	if err := d.Persist(st); err != nil {
		return fmt.Errorf("persisting boot state: %w", err)
	}
	return nil
}

func (d *Driver) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now().UTC()
}

// ConsoleEvidence is an EvidenceFunc that reads a console stream (serial log,
// SOL) until a line matches re. The stream is read as it comes: lines of an
// earlier attempt are the caller's to have consumed.
func ConsoleEvidence(r io.Reader, re *regexp.Regexp) EvidenceFunc {
	return func(ctx context.Context, _ *Plan, _ time.Time) error {
		found := make(chan error, 1)
		go func() {
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				if re.Match(sc.Bytes()) {
					found <- nil
					return
				}
			}
			if err := sc.Err(); err != nil {
				found <- err
				return
			}
			found <- fmt.Errorf("console ended before %q appeared", re)
		}()
		select {
		case err := <-found:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
