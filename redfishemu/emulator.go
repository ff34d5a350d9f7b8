// Package redfishemu is a Redfish BMC emulator at the protocol tier: enough of
// ServiceRoot, SessionService, one ComputerSystem and one Manager with a
// virtual media CD slot to drive boots, with real Once semantics, ETags, and
// injectable faults and vendor quirks. It is an http.Handler; OnBoot lets a
// lower tier (QEMU) follow what the emulated system would boot.
package redfishemu

import (
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// BootEvent is what the emulated system boots when it powers on or resets.
type BootEvent struct {
	// Target is the effective boot target: the override's when one is
	// active, else the first entry of the boot order (Hdd).
	Target      string
	HTTPBootURI string
	// MediaImage is the inserted virtual media image, if any.
	MediaImage string
}

// Options configure the emulator, its faults and vendor quirks.
type Options struct {
	Username, Password string // default admin/password
	// Manufacturer of the system and manager; "Supermicro" also switches
	// the virtual media boot target from Cd to UsbCd.
	Manufacturer string
	// RequireIfMatch answers 428 to a PATCH without If-Match.
	RequireIfMatch bool
	// FaultRate is the probability that a request (other than the session
	// logout) fails with 503, or a PATCH with 412 (stale ETag).
	FaultRate float64
	// FaultEveryN fails every Nth request with 503 (0: never).
	FaultEveryN int
	// Seed makes FaultRate reproducible.
	Seed uint64
	// InsertRequiresEject refuses InsertMedia while media is inserted.
	InsertRequiresEject bool
	// OnceAsContinuous keeps a Once override after boot (a buggy BMC).
	OnceAsContinuous bool
	// NoContinuous refuses BootSourceOverrideEnabled=Continuous.
	NoContinuous bool
	// NoUefiHttp leaves UefiHttp out of the allowable targets.
	NoUefiHttp bool
	// NoVirtualMedia removes the manager's virtual media.
	NoVirtualMedia bool
	// AsyncReset answers Reset with 202 + a task monitor that completes
	// after TaskPolls polls.
	AsyncReset bool
	TaskPolls  int

	// The knobs below model how vendors' BMCs differ; Personalities names
	// the combinations real BMCs show.

	// CdTarget is the boot target of the virtual CD: "Cd" (default) or
	// "UsbCd". Manufacturer "Supermicro" defaults it to "UsbCd".
	CdTarget string
	// MediaUnderSystem serves the virtual media under
	// Systems/1/VirtualMedia (linked from the system) instead of
	// Managers/1/VirtualMedia.
	MediaUnderSystem bool
	// MediaPatchOnly offers no InsertMedia/EjectMedia actions: a POST to
	// them is 405, and the media is changed by PATCHing Image, Inserted and
	// WriteProtected on the VirtualMedia resource.
	MediaPatchOnly bool
	// InsertNeedsTransfer refuses InsertMedia without TransferProtocolType
	// (400 ActionParameterMissing) and then without TransferMethod (400
	// GeneralError), as sushy's detection of these errors expects.
	InsertNeedsTransfer bool
	// InsertRejectsOptional refuses InsertMedia carrying Inserted or
	// WriteProtected (400 ActionParameterUnknown).
	InsertRejectsOptional bool
	// RequireOverrideMode refuses a Boot PATCH that sets the target or
	// enabled state without BootSourceOverrideMode (400 PropertyMissing).
	RequireOverrideMode bool
	// NoSessionService: no SessionService (404); only basic auth works.
	NoSessionService bool
	// SessionRequests ends a session after that many requests made with
	// it (0: never); later requests with its token get 401.
	SessionRequests int
	// EjectNeedsBody answers 415 to an EjectMedia POST without a JSON body.
	EjectNeedsBody bool
	// AsyncInsert answers InsertMedia (or the PATCH that inserts) with 202
	// + a task monitor, completing after TaskPolls polls; the media shows
	// as inserted only then.
	AsyncInsert bool
	// InstructionSet is what the system's CPU reports in its Processor
	// resource (Systems/1/Processors/CPU1): "x86-64" (default), "ARM-A64",
	// any Redfish InstructionSet value.
	InstructionSet string
	// NoInstructionSet leaves InstructionSet (optional in the DMTF
	// Processor schema) out of the CPU.
	NoInstructionSet bool
	// EmptySocketFirst lists an empty CPU socket (Status.State Absent,
	// nothing else) before the populated one, as bmcweb does.
	EmptySocketFirst bool
	// OnBoot is called, outside the emulator's lock, whenever the system
	// boots (power on, restart, power cycle).
	OnBoot func(BootEvent)
	// OnPowerOff is called, outside the emulator's lock, when the system
	// powers off (ForceOff, GracefulShutdown) while it was on.
	OnPowerOff func()
	// OnNew is called by New with the new emulator, so a lower tier
	// attached to these Options can report what the system does by itself
	// (SystemReset).
	OnNew func(*Emulator)
}

// CdBootTarget is the boot target of the virtual CD: CdTarget, else
// "UsbCd" for Supermicro, else "Cd".
func (o Options) CdBootTarget() string {
	switch {
	case o.CdTarget != "":
		return o.CdTarget
	case strings.EqualFold(o.Manufacturer, "Supermicro"):
		return "UsbCd"
	}
	return "Cd"
}

// Emulator is one emulated BMC.
type Emulator struct {
	opts     Options
	requests atomic.Int64
	faults   atomic.Int64
	mux      *http.ServeMux

	mu       sync.Mutex
	rng      *mrand.Rand
	sessions map[string]*session // token -> session
	nextSess int
	power    string
	boot     bootState
	media    mediaState
	version  int // bumped on every change; the ETag derives from it
	boots    []BootEvent
	tasks    map[string]*task
	resets   int // Reset actions received
}

type session struct {
	id   string
	used int
}

// task is a pending task monitor; done runs (under e.mu) when it completes.
type task struct {
	left int
	done func()
}

type bootState struct {
	Enabled, Target, Mode, HTTPBootURI string
}

type mediaState struct {
	Inserted, WriteProtected bool
	Image                    string
}

// New returns an emulator with the system powered off and no override.
func New(opts Options) *Emulator {
	if opts.Username == "" {
		opts.Username, opts.Password = "admin", "password"
	}
	if opts.Manufacturer == "" {
		opts.Manufacturer = "Contoso"
	}
	if opts.InstructionSet == "" {
		opts.InstructionSet = "x86-64"
	}
	e := &Emulator{
		opts:     opts,
		rng:      mrand.New(mrand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		sessions: map[string]*session{},
		power:    "Off",
		boot:     bootState{Enabled: "Disabled", Target: "None", Mode: "UEFI"},
		tasks:    map[string]*task{},
	}
	e.opts.CdTarget = opts.CdBootTarget()
	e.routes()
	if opts.OnNew != nil {
		opts.OnNew(e)
	}
	return e
}

// Requests counts every HTTP request received.
func (e *Emulator) Requests() int64 { return e.requests.Load() }

// Faults counts injected faults (503 and 412).
func (e *Emulator) Faults() int64 { return e.faults.Load() }

// Boots returns every boot so far.
func (e *Emulator) Boots() []BootEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.boots)
}

// Snapshot is the emulated system's state, for tests.
type Snapshot struct {
	PowerState                                                 string
	OverrideEnabled, OverrideTarget, OverrideMode, HTTPBootURI string
	MediaInserted, MediaWriteProtected                         bool
	MediaImage                                                 string
}

// State returns a snapshot of the system.
func (e *Emulator) State() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Snapshot{e.power, e.boot.Enabled, e.boot.Target, e.boot.Mode, e.boot.HTTPBootURI, e.media.Inserted, e.media.WriteProtected, e.media.Image}
}

// PowerOn boots the system as if someone pressed the power button (or a
// reboot happened outside the driver): the override, if any, applies.
func (e *Emulator) PowerOn() {
	e.mu.Lock()
	ev := e.bootLocked()
	e.mu.Unlock()
	e.fire(ev)
}

// SystemReset is a reset the system does by itself (the OS rebooting, a
// watchdog): if the system is on it boots again, the override in effect
// applying as at a ForceRestart (a consumed Once no longer does), and OnBoot
// fires. A system that is off stays off. It reports whether it booted.
func (e *Emulator) SystemReset() bool {
	e.mu.Lock()
	if e.power != "On" {
		e.mu.Unlock()
		return false
	}
	ev := e.bootLocked()
	e.mu.Unlock()
	e.fire(ev)
	return true
}

// Resets counts the Reset actions received (a non-idempotent action a
// driver must send exactly once per boot).
func (e *Emulator) Resets() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resets
}

func (e *Emulator) allowedTargets() []string {
	t := []string{"None", "Pxe", "Hdd", "BiosSetup", e.opts.CdTarget}
	if !e.opts.NoUefiHttp {
		t = append(t, "UefiHttp")
	}
	return t
}

func (e *Emulator) etag() string { return fmt.Sprintf(`W/"%d"`, e.version) }

// bootLocked performs a boot: powers on, computes the effective target,
// consumes a Once override.
func (e *Emulator) bootLocked() BootEvent {
	e.power = "On"
	ev := BootEvent{Target: "Hdd"}
	if e.boot.Enabled != "Disabled" && e.boot.Target != "None" {
		ev.Target = e.boot.Target
		if ev.Target == "UefiHttp" {
			ev.HTTPBootURI = e.boot.HTTPBootURI
		}
	}
	if e.media.Inserted {
		ev.MediaImage = e.media.Image
	}
	if e.boot.Enabled == "Once" && !e.opts.OnceAsContinuous {
		e.boot.Enabled, e.boot.Target = "Disabled", "None"
	}
	e.version++
	e.boots = append(e.boots, ev)
	return ev
}

func (e *Emulator) fire(ev BootEvent) {
	if e.opts.OnBoot != nil {
		e.opts.OnBoot(ev)
	}
}
