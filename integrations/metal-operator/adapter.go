package metaloperator

import (
	"context"
	"fmt"
	"sync"

	"github.com/ironcore-dev/metal-operator/bmc"
	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/ironcore-dev/os-builder/boot"
)

// Adapter implements boot.BMC over metal-operator's own bmc.BMC, for a
// controller that already holds one. That interface can power the system,
// set a one-time PXE override and write the boot order, nothing more: the
// capabilities it reports say exactly that, so method choice picks pxe and
// the driver refuses uefi-http, virtual media and disk boots (ErrCapability)
// before any BMC call that would fail half-way.
type Adapter struct {
	BMC       bmc.BMC
	SystemURI string // the Server's spec.systemURI (/redfish/v1/Systems/...)

	mu sync.Mutex
	// set is the last override this adapter set; it answers BootOverride
	// when the client offers no way to read it back.
	set *boot.Override
}

// gofishClient is what metal-operator's Redfish clients (RedfishBaseBMC and
// the vendor types embedding it) expose besides bmc.BMC: the connection,
// used here only to read the boot override back.
type gofishClient interface {
	Client() *gofish.APIClient
}

// Capabilities reports Pxe as the only target: bmc.BMC's SetBootOverride sets
// Pxe/Once and nothing else, it has no virtual media and no Continuous
// override (SetBootOrder clears the override instead). The instruction set
// is the system's CPUs' (GetProcessors).
func (a *Adapter) Capabilities(ctx context.Context) (boot.Capabilities, error) {
	info, err := a.BMC.GetSystemInfo(ctx, a.SystemURI)
	if err != nil {
		return boot.Capabilities{}, fmt.Errorf("reading system %s: %w", a.SystemURI, err)
	}
	procs, err := a.BMC.GetProcessors(ctx, a.SystemURI)
	if err != nil {
		return boot.Capabilities{}, fmt.Errorf("reading processors of %s: %w", a.SystemURI, err)
	}
	caps := boot.Capabilities{Manufacturer: info.Manufacturer, AllowedTargets: []string{boot.TargetPxe}}
	// The CPUs say the architecture: the first CPU (type CPU or unset)
	// that reports an instruction set.
	for _, p := range procs {
		if (p.Type == "" || p.Type == "CPU") && p.InstructionSet != "" {
			caps.InstructionSet = p.InstructionSet
			break
		}
	}
	return caps, nil
}

// BootOverride reads the override through the client's connection where it
// has one, else answers what this adapter set last (an empty override makes
// the driver set it again before powering on, which is safe: Pxe/Once).
func (a *Adapter) BootOverride(ctx context.Context) (boot.Override, error) {
	if c, ok := a.BMC.(gofishClient); ok && c.Client() != nil {
		sys, err := schemas.GetObject[schemas.ComputerSystem](c.Client(), a.SystemURI)
		if err != nil {
			return boot.Override{}, fmt.Errorf("reading boot override of %s: %w", a.SystemURI, err)
		}
		return boot.Override{Target: string(sys.Boot.BootSourceOverrideTarget), Enabled: string(sys.Boot.BootSourceOverrideEnabled),
			Mode: string(sys.Boot.BootSourceOverrideMode), HTTPBootURI: sys.Boot.HTTPBootURI}, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.set == nil {
		return boot.Override{}, nil
	}
	return *a.set, nil
}

// SetBootOverride maps the two overrides bmc.BMC can express: Pxe/Once
// (SetBootOverride) and "no override" (SetBootOrder with the current order,
// which sends target None); anything else is a missing capability.
func (a *Adapter) SetBootOverride(ctx context.Context, o boot.Override) error {
	switch {
	case o.Target == boot.TargetPxe && o.Enabled == boot.EnabledOnce && o.HTTPBootURI == "":
		if err := a.BMC.SetBootOverride(ctx, a.SystemURI); err != nil {
			return fmt.Errorf("setting Pxe once on %s: %w", a.SystemURI, err)
		}
	case o.Target == boot.TargetNone || o.Enabled == boot.EnabledDisabled:
		order, err := a.BMC.GetBootOrder(ctx, a.SystemURI)
		if err != nil {
			return fmt.Errorf("reading boot order of %s: %w", a.SystemURI, err)
		}
		if err := a.BMC.SetBootOrder(ctx, a.SystemURI, order); err != nil {
			return fmt.Errorf("clearing boot override of %s: %w", a.SystemURI, err)
		}
	default:
		return fmt.Errorf("%w: metal-operator's BMC client sets only Pxe once or clears the override, not %s/%s", boot.ErrCapability, o.Target, o.Enabled)
	}
	a.mu.Lock()
	a.set = &o
	a.mu.Unlock()
	return nil
}

// Media reports an empty slot: the client has no virtual media.
func (a *Adapter) Media(context.Context) (boot.Media, error) { return boot.Media{}, nil }

// InsertMedia is a missing capability.
func (a *Adapter) InsertMedia(context.Context, string) error {
	return fmt.Errorf("%w: metal-operator's BMC client has no virtual media", boot.ErrCapability)
}

// EjectMedia has nothing to eject.
func (a *Adapter) EjectMedia(context.Context) error { return nil }

// PowerState is the system's Redfish PowerState.
func (a *Adapter) PowerState(ctx context.Context) (string, error) {
	info, err := a.BMC.GetSystemInfo(ctx, a.SystemURI)
	if err != nil {
		return "", fmt.Errorf("reading power state of %s: %w", a.SystemURI, err)
	}
	return string(info.PowerState), nil
}

// Reset powers on ("On") or resets with the given Redfish ResetType.
func (a *Adapter) Reset(ctx context.Context, resetType string) error {
	var err error
	if resetType == "On" {
		err = a.BMC.PowerOn(ctx, a.SystemURI)
	} else {
		err = a.BMC.Reset(ctx, a.SystemURI, schemas.ResetType(resetType))
	}
	if err != nil {
		return fmt.Errorf("reset %s of %s: %w", resetType, a.SystemURI, err)
	}
	return nil
}

var _ boot.BMC = (*Adapter)(nil)
