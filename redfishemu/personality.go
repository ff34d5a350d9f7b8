package redfishemu

import (
	"fmt"
	"slices"
	"strings"
)

// Personality is a named set of behaviour knobs (the vendor-difference
// fields of Options) that reproduces how one family of real BMCs behaves.
// Source says which public material the behaviour is taken from.
type Personality struct {
	Name   string
	Source string
	// Knobs holds only behaviour fields; Apply copies them onto Options.
	Knobs Options
}

// Personalities are the presets, each derived from public material cited in
// its Source (and the comment above it). A name is a vendor family only
// where the source names that vendor; otherwise it says what the BMC does.
var Personalities = []Personality{
	// DMTF/Redfish-Mockup-Server public-rackmount1: Managers/BMC/VirtualMedia/CD1
	// carries #VirtualMedia.InsertMedia and #VirtualMedia.EjectMedia; the
	// system allows Continuous overrides; sessions via SessionService.
	// The emulator's default behaviour.
	{Name: "dmtf-rackmount", Source: "DMTF/Redfish-Mockup-Server public-rackmount1 (Managers/BMC/VirtualMedia/CD1 with actions)"},

	// DMTF/Redfish-Mockup-Server public-rackmount1
	// Systems/2288HV5-1/VirtualMedia/CD1: the virtual CD lives under the
	// system and has no Actions at all, so it can only be PATCHed.
	{Name: "dmtf-system-media", Source: "DMTF/Redfish-Mockup-Server public-rackmount1 Systems/2288HV5-1/VirtualMedia/CD1 (under Systems/, no Actions)",
		Knobs: Options{MediaUnderSystem: true, MediaPatchOnly: true}},

	// openstack/sushy sushy/resources/manager/virtual_media.py insert_media:
	// "some BMCs (e.g. Lenovo SD530 which is using PATCH method as opposed
	// to InsertMedia action) will not attach vMedia if Inserted is not
	// specified"; its PATCH path sends If-Match with the resource's ETag.
	// Lenovo XClarity Controller: media under Managers/, PATCH only, and a
	// PATCH needs a current If-Match (428 without, 412 stale).
	{Name: "lenovo-xcc", Source: "openstack/sushy virtual_media.py insert_media (Lenovo SD530 uses PATCH, not InsertMedia; PATCH sends If-Match)",
		Knobs: Options{Manufacturer: "Lenovo", MediaPatchOnly: true, RequireIfMatch: true}},

	// openstack/sushy virtual_media.py insert_media: "machines such as
	// SuperMicro X11 will return an error if Inserted or WriteProtected are
	// specified" (fix for SuperMicro X11/X12). The virtual CD boots as
	// UsbCd; BootSourceOverrideMode must be sent (jgato/jgato
	// random_docs/Configuring_SuperMicro_UEFI.md: Metal3 PATCHes
	// BootSourceOverrideMode on Supermicro, which answers 400 on a mode it
	// does not take).
	{Name: "supermicro", Source: "openstack/sushy virtual_media.py (SuperMicro X11/X12 reject Inserted/WriteProtected); jgato/jgato Configuring_SuperMicro_UEFI.md (UsbCd, BootSourceOverrideMode)",
		Knobs: Options{Manufacturer: "Supermicro", CdTarget: "UsbCd", RequireOverrideMode: true, InsertRejectsOptional: true}},

	// openstack/sushy virtual_media.py is_transfer_protocol_required /
	// is_transfer_method_required: InsertMedia fails with
	// ActionParameterMissing naming #/TransferProtocolType, then with a
	// GeneralError naming TransferMethod, until both are sent.
	{Name: "transfer-params", Source: "openstack/sushy virtual_media.py is_transfer_protocol_required, is_transfer_method_required",
		Knobs: Options{InsertNeedsTransfer: true}},

	// openstack/sushy-tools emulator templates/system.json: the system
	// links VirtualMedia under Systems/<id>/VirtualMedia (with InsertMedia
	// and EjectMedia actions, templates/virtual_media.json), allows
	// Pxe, Cd, Hdd and UefiHttp, and its overrides are Continuous.
	{Name: "sushy-emulator", Source: "openstack/sushy-tools sushy_tools/emulator/templates/system.json, virtual_media.json",
		Knobs: Options{Manufacturer: "Sushy Emulator", MediaUnderSystem: true}},

	// HPE iLO 4: the RESTful Interface Tool sample script
	// Set_One_Time_Boot_Order.bat (HPE ilorest examples) lists the one-time
	// boot targets of iLO 4 and says "SDCard" and "UefiHttp" work only on
	// iLO 5; openstack/sushy virtual_media.py eject_media: "Some vendors
	// like HPE iLO ... needs to pass an empty dict" to EjectMedia.
	{Name: "hpe-ilo4", Source: "HPE ilorest sample Set_One_Time_Boot_Order.bat (UefiHttp only on iLO 5); openstack/sushy virtual_media.py eject_media (HPE iLO needs a {} body)",
		Knobs: Options{Manufacturer: "HPE", NoUefiHttp: true, EjectNeedsBody: true}},

	// A BMC without a SessionService: openstack/sushy auth.py
	// SessionOrBasicAuth falls back to basic auth when no session can be
	// opened, as the issue asks the driver to do by default.
	{Name: "no-sessions", Source: "openstack/sushy sushy/auth.py SessionOrBasicAuth (basic auth when sessions fail)",
		Knobs: Options{NoSessionService: true}},

	// Sessions that expire mid-run: openstack/sushy connector.py re-opens
	// the session and repeats the request once on a 401 for a session it
	// had (session timeouts of vendor BMCs, e.g. SessionTimeout in
	// DMTF public-rackmount1 SessionService).
	{Name: "short-sessions", Source: "openstack/sushy sushy/connector.py (re-authenticate once on 401); DMTF public-rackmount1 SessionService.SessionTimeout",
		Knobs: Options{SessionRequests: 6}},

	// Firmware that keeps a Once override after the boot, and offers no
	// Continuous (BootSourceOverrideEnabled@Redfish.AllowableValues lists
	// Disabled and Once only, which the Redfish schema allows): the
	// driver's pin-disk must clear the override instead of pinning Hdd
	// Continuous.
	{Name: "once-only", Source: "DMTF Redfish ComputerSystem schema (BootSourceOverrideEnabled allowable values are per implementation); docs/boot-driver.md vendor quirks",
		Knobs: Options{NoContinuous: true, OnceAsContinuous: true}},

	// openbmc/bmcweb redfish-core/lib/processor.hpp: a CPU whose
	// Manufacturer names Ampere is reported with ProcessorArchitecture ARM
	// and InstructionSet ARM-A64 (Ampere Altra / AmpereOne servers, the
	// Mt. Jade / Mt. Mitchell reference BMCs run OpenBMC); a CPU that is
	// not present is Status.State Absent. An arm64 server: the driver
	// boots the image's arm64 build.
	{Name: "openbmc-ampere", Source: "openbmc/bmcweb redfish-core/lib/processor.hpp (Ampere CPUs: ProcessorArchitecture ARM, InstructionSet ARM-A64; absent CPUs: Status.State Absent)",
		Knobs: Options{InstructionSet: "ARM-A64", EmptySocketFirst: true}},

	// DMTF Processor schema: InstructionSet is optional, and
	// ComputerSystem.ProcessorSummary carries Count and Model but no
	// instruction set. A server whose BMC says nothing: the driver boots an
	// image's only build, and refuses an image with several (--arch says).
	{Name: "no-instruction-set", Source: "DMTF Redfish Processor schema (InstructionSet optional); ComputerSystem ProcessorSummary (no InstructionSet)",
		Knobs: Options{NoInstructionSet: true}},

	// Redfish specification DSP0266 "Asynchronous operations": a
	// long-running action answers 202 Accepted with a task monitor in
	// Location (DMTF public-rackmount1 TaskService). Reset and media
	// insertion complete only when the monitor says so.
	{Name: "async-tasks", Source: "DMTF DSP0266 asynchronous operations (202 + task monitor); DMTF public-rackmount1 TaskService",
		Knobs: Options{AsyncReset: true, AsyncInsert: true, TaskPolls: 3}},
}

// Quirks says briefly how the personality differs from the default
// emulator, in the order of Options' fields.
func (p Personality) Quirks() string {
	k := p.Knobs
	var q []string
	for _, c := range []struct {
		on   bool
		what string
	}{
		{k.RequireIfMatch, "PATCH needs If-Match (428/412)"},
		{k.OnceAsContinuous, "Once never cleared"},
		{k.NoContinuous, "no Continuous"},
		{k.NoUefiHttp, "no UefiHttp"},
		{k.NoVirtualMedia, "no virtual media"},
		{k.AsyncReset, "Reset via 202 task"},
		{k.CdTarget != "" && k.CdTarget != "Cd", k.CdTarget + " instead of Cd"},
		{k.MediaUnderSystem, "media under Systems/"},
		{k.MediaPatchOnly, "media PATCH only (no actions)"},
		{k.InsertNeedsTransfer, "InsertMedia needs TransferProtocolType, TransferMethod"},
		{k.InsertRejectsOptional, "InsertMedia rejects Inserted/WriteProtected"},
		{k.RequireOverrideMode, "BootSourceOverrideMode required"},
		{k.NoSessionService, "no SessionService (basic auth)"},
		{k.SessionRequests > 0, fmt.Sprintf("sessions expire after %d requests", k.SessionRequests)},
		{k.EjectNeedsBody, "EjectMedia needs a JSON body"},
		{k.AsyncInsert, "InsertMedia via 202 task"},
		{k.InstructionSet != "" && k.InstructionSet != "x86-64", "CPUs report " + k.InstructionSet},
		{k.EmptySocketFirst, "an empty CPU socket listed first"},
		{k.NoInstructionSet, "CPUs report no InstructionSet"},
	} {
		if c.on {
			q = append(q, c.what)
		}
	}
	if len(q) == 0 {
		return "baseline: actions under Managers/, sessions, Continuous"
	}
	return strings.Join(q, "; ")
}

// LookupPersonality returns the preset named name.
func LookupPersonality(name string) (Personality, error) {
	i := slices.IndexFunc(Personalities, func(p Personality) bool { return p.Name == name })
	if i < 0 {
		return Personality{}, fmt.Errorf("unknown personality %q (known: %s)", name, strings.Join(PersonalityNames(), ", "))
	}
	return Personalities[i], nil
}

// PersonalityNames lists the presets' names.
func PersonalityNames() []string {
	var names []string
	for _, p := range Personalities {
		names = append(names, p.Name)
	}
	return names
}

// Apply sets the personality's knobs on o: flags it sets are switched on,
// values it names replace o's. Fields it leaves zero keep o's values, so a
// personality composes with explicit options (faults, hooks).
func (p Personality) Apply(o *Options) {
	k := p.Knobs
	if k.Manufacturer != "" {
		o.Manufacturer = k.Manufacturer
	}
	if k.CdTarget != "" {
		o.CdTarget = k.CdTarget
	}
	if k.SessionRequests != 0 {
		o.SessionRequests = k.SessionRequests
	}
	if k.TaskPolls != 0 {
		o.TaskPolls = k.TaskPolls
	}
	if k.InstructionSet != "" {
		o.InstructionSet = k.InstructionSet
	}
	for _, f := range []struct{ from, to *bool }{
		{&k.RequireIfMatch, &o.RequireIfMatch},
		{&k.InsertRequiresEject, &o.InsertRequiresEject},
		{&k.OnceAsContinuous, &o.OnceAsContinuous},
		{&k.NoContinuous, &o.NoContinuous},
		{&k.NoUefiHttp, &o.NoUefiHttp},
		{&k.NoVirtualMedia, &o.NoVirtualMedia},
		{&k.AsyncReset, &o.AsyncReset},
		{&k.MediaUnderSystem, &o.MediaUnderSystem},
		{&k.MediaPatchOnly, &o.MediaPatchOnly},
		{&k.InsertNeedsTransfer, &o.InsertNeedsTransfer},
		{&k.InsertRejectsOptional, &o.InsertRejectsOptional},
		{&k.RequireOverrideMode, &o.RequireOverrideMode},
		{&k.NoSessionService, &o.NoSessionService},
		{&k.AsyncInsert, &o.AsyncInsert},
		{&k.EjectNeedsBody, &o.EjectNeedsBody},
		{&k.NoInstructionSet, &o.NoInstructionSet},
		{&k.EmptySocketFirst, &o.EmptySocketFirst},
	} {
		*f.to = *f.to || *f.from
	}
}
