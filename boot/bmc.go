package boot

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// BMC is what the driver needs from a baseboard management controller. It is
// deliberately small so it can be decorated (logging, rate limiting,
// recording); boot/redfish implements it over Redfish. Targets use the plan's
// spelling (Cd, not a vendor's UsbCd): vendor mapping is the implementation's.
type BMC interface {
	// Capabilities reports what the BMC can do for booting.
	Capabilities(ctx context.Context) (Capabilities, error)
	// BootOverride reads the current boot source override.
	BootOverride(ctx context.Context) (Override, error)
	// SetBootOverride sets the boot source override.
	SetBootOverride(ctx context.Context, o Override) error
	// Media reads the CD virtual media slot.
	Media(ctx context.Context) (Media, error)
	// InsertMedia inserts an image (write-protected) into the CD slot.
	InsertMedia(ctx context.Context, image string) error
	// EjectMedia ejects whatever is in the CD slot; an empty slot is fine.
	EjectMedia(ctx context.Context) error
	// PowerState is "On" or "Off" (Redfish PowerState).
	PowerState(ctx context.Context) (string, error)
	// Reset performs a ComputerSystem.Reset ("On", "ForceRestart", ...).
	Reset(ctx context.Context, resetType string) error
}

// Capabilities is what the BMC offers for booting.
type Capabilities struct {
	Manufacturer string `json:"manufacturer,omitempty"`
	// AllowedTargets are the BootSourceOverrideTarget allowable values, in
	// the plan's spelling; empty means the BMC does not say.
	AllowedTargets []string `json:"allowedTargets,omitempty"`
	// VirtualMediaCD says a CD-capable virtual media slot exists.
	VirtualMediaCD bool `json:"virtualMediaCD"`
	// ContinuousSupported says BootSourceOverrideEnabled=Continuous works.
	ContinuousSupported bool `json:"continuousSupported"`
	// InstructionSet is the Redfish InstructionSet of the system's CPUs
	// (x86-64, ARM-A64; ArchitectureOf maps it), empty when none reports
	// one.
	InstructionSet string `json:"instructionSet,omitempty"`
}

// Media is the state of the CD virtual media slot.
type Media struct {
	Inserted bool   `json:"inserted"`
	Image    string `json:"image,omitempty"`
}

// LoggingBMC decorates a BMC, reporting each call and its outcome to Logf.
// It never sees credentials: those stay inside the implementation.
type LoggingBMC struct {
	BMC
	Logf func(format string, args ...any)
}

func (l LoggingBMC) log(op string, start time.Time, err error) {
	if err != nil {
		l.Logf("bmc %s failed after %s: %v", op, time.Since(start).Round(time.Millisecond), err)
		return
	}
	l.Logf("bmc %s ok (%s)", op, time.Since(start).Round(time.Millisecond))
}

func (l LoggingBMC) SetBootOverride(ctx context.Context, o Override) error {
	start := time.Now()
	err := l.BMC.SetBootOverride(ctx, o)
	l.log(fmt.Sprintf("set override %s/%s", o.Target, o.Enabled), start, err)
	return err
}

func (l LoggingBMC) InsertMedia(ctx context.Context, image string) error {
	start := time.Now()
	err := l.BMC.InsertMedia(ctx, image)
	l.log("insert media "+image, start, err)
	return err
}

func (l LoggingBMC) EjectMedia(ctx context.Context) error {
	start := time.Now()
	err := l.BMC.EjectMedia(ctx)
	l.log("eject media", start, err)
	return err
}

func (l LoggingBMC) Reset(ctx context.Context, resetType string) error {
	start := time.Now()
	err := l.BMC.Reset(ctx, resetType)
	l.log("reset "+resetType, start, err)
	return err
}

// ErrCapability marks a BMC that cannot do what the plan needs.
var ErrCapability = errors.New("BMC capability")

// ErrTimeout marks a wait that ran out of time (media insertion, evidence).
var ErrTimeout = errors.New("timed out")

// ServerArchFromBMC is the server's architecture by what the BMC reports
// (its instruction set).
func ServerArchFromBMC(instructionSet string) ServerArch {
	if instructionSet == "" {
		return ServerArch{From: "the BMC reports no InstructionSet for the system's CPUs"}
	}
	arch, err := ArchitectureOf(instructionSet)
	if err != nil {
		return ServerArch{From: "the BMC reports " + err.Error()}
	}
	return ServerArch{Arch: arch, From: "the BMC's Processors report " + instructionSet}
}
