package boot

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/ironcore-dev/os-builder/initrd/cmdline"
	"github.com/ironcore-dev/os-builder/osimage"
)

// StepKind names a step of a plan.
type StepKind string

const (
	StepPublishArtifacts StepKind = "publish-artifacts"
	StepCheckCapability  StepKind = "check-capability"
	StepEjectMedia       StepKind = "eject-media"
	StepInsertMedia      StepKind = "insert-media"
	StepWaitMedia        StepKind = "wait-media-inserted"
	StepSetOverride      StepKind = "set-override"
	StepPower            StepKind = "power-on-or-restart"
	StepWaitEvidence     StepKind = "wait-evidence"
	StepPinDisk          StepKind = "pin-disk"
)

// Plan is an ordered list of steps, as data: JSON-serialisable and printable
// for a dry run. It depends only on the image identity and the request.
type Plan struct {
	Image  string             `json:"image,omitempty"`
	Method osimage.BootMethod `json:"method"`
	Policy Policy             `json:"policy"`
	// Install is set only for a non-default install mode, so plans (and the
	// digests saved states carry) of plain boots are unchanged.
	Install *Install `json:"install,omitempty"`
	// Architecture is the image build's architecture the plan boots (set
	// by Session; empty where the image names none), and ArchitectureFrom
	// why: what said the server's architecture.
	Architecture     string `json:"architecture,omitempty"`
	ArchitectureFrom string `json:"architectureFrom,omitempty"`
	// Choice says why the method was chosen (auto with the BMC's
	// capabilities known); Notes say how the BMC's limits change the boot.
	Choice string   `json:"choice,omitempty"`
	Notes  []string `json:"notes,omitempty"`
	Steps  []Step   `json:"steps"`
}

// Step is one action of a plan. Only the fields of its kind are set.
type Step struct {
	Kind StepKind `json:"kind"`
	// Artifacts and Scripts to publish (StepPublishArtifacts).
	Artifacts []PublishedArtifact `json:"artifacts,omitempty"`
	Scripts   []Script            `json:"scripts,omitempty"`
	// RequireTarget is a boot target the BMC must allow; RequireVirtualMedia
	// asks for a CD-capable virtual media slot (StepCheckCapability).
	RequireTarget       string `json:"requireTarget,omitempty"`
	RequireVirtualMedia bool   `json:"requireVirtualMedia,omitempty"`
	// Override to set (StepSetOverride, StepPinDisk).
	Override *Override `json:"override,omitempty"`
	// MediaImage to insert (StepInsertMedia, StepWaitMedia).
	MediaImage string `json:"mediaImage,omitempty"`
}

// PublishedArtifact is an artifact and the URL it is served at.
type PublishedArtifact struct {
	Artifact
	URL string `json:"url"`
}

// Script is a generated text file served by the artifact server (the iPXE
// script). Its URL is content-addressed, so the same plan yields the same URL.
type Script struct {
	Name    string `json:"name"`
	URL     string `json:"url"`
	Content string `json:"content"`
}

// Resolve builds the plan for booting an image from its boot identity (read
// with osimage.ReadIdentity). Every check that needs only the image and the
// request happens here, before any BMC call. Without the BMC's capabilities
// an auto method is the image's default; ResolveFor chooses by them.
func Resolve(id *osimage.BootIdentity, req Request) (*Plan, error) {
	return ResolveFor(id, req, nil)
}

// ResolveFor is Resolve knowing what the BMC offers (Capabilities, read
// before any artifact is fetched): an auto method becomes the first of the
// image's methods, in its order of preference, the BMC allows; a forced
// method the BMC cannot do is refused naming the missing capability.
func ResolveFor(id *osimage.BootIdentity, req Request, caps *Capabilities) (*Plan, error) {
	if id == nil {
		return nil, fmt.Errorf("%w: no image identity", ErrPlan)
	}
	if caps == nil || (req.Method != "" && req.Method != MethodAuto) {
		p, err := resolve(id, req)
		if err != nil || caps == nil {
			return p, err
		}
		if err := caps.Offers(p.Method); err != nil {
			return nil, fmt.Errorf("method %s: %w", p.Method, err)
		}
		p.Notes = caps.notes(p)
		return p, nil
	}
	var offered []osimage.BootMethod
	var why []string
	for _, m := range preference(id, req) {
		r := req
		r.Method = m
		p, err := resolve(id, r)
		if err != nil {
			continue // the image (or install mode) cannot boot this way
		}
		offered = append(offered, m)
		if err := caps.Offers(m); err != nil {
			why = append(why, fmt.Sprintf("%s: %s", m, strings.TrimPrefix(err.Error(), ErrCapability.Error()+": ")))
			continue
		}
		if m == offered[0] {
			p.Choice = fmt.Sprintf("image's first choice; BMC allows %s", caps.allows())
		} else {
			p.Choice = fmt.Sprintf("image prefers %s; BMC allows %s", offered[0], caps.allows())
		}
		p.Notes = caps.notes(p)
		return p, nil
	}
	if len(offered) == 0 {
		return resolve(id, req) // the image-side error, as without the BMC
	}
	return nil, fmt.Errorf("%w: no boot method fits: the image offers %v, the BMC allows %s (%s)", ErrCapability, offered, caps.allows(), strings.Join(why, "; "))
}

// preference is the image's methods in its order of preference: its
// default, then the rest as declared. Disk boot only when it is the default:
// booting what is installed is no substitute for a network boot.
func preference(id *osimage.BootIdentity, req Request) []osimage.BootMethod {
	if req.Install.Mode == osimage.InstallDisk || req.Install.RootURL {
		return []osimage.BootMethod{osimage.BootPXE}
	}
	ms := []osimage.BootMethod{}
	if id.Default != "" {
		ms = append(ms, id.Default)
	}
	for _, m := range id.Methods {
		if !slices.Contains(ms, m) && m != osimage.BootDisk {
			ms = append(ms, m)
		}
	}
	return ms
}

// targetOf is the boot target a method needs.
func targetOf(m osimage.BootMethod) string {
	switch m {
	case osimage.BootUEFIHTTP:
		return TargetUefiHttp
	case osimage.BootPXE:
		return TargetPxe
	case osimage.BootVirtualMedia:
		return TargetCd
	case osimage.BootDisk:
		return TargetHdd
	}
	return ""
}

// Offers says whether the BMC can boot by method m; the error names the
// missing capability.
func (c *Capabilities) Offers(m osimage.BootMethod) error {
	return c.check(targetOf(m), m == osimage.BootVirtualMedia)
}

func (c *Capabilities) check(target string, virtualMedia bool) error {
	if target != "" && len(c.AllowedTargets) > 0 && !slices.Contains(c.AllowedTargets, target) {
		return fmt.Errorf("%w: BMC offers no %s boot target (allows %s)", ErrCapability, target, c.allows())
	}
	if virtualMedia && !c.VirtualMediaCD {
		return fmt.Errorf("%w: BMC has no CD-capable virtual media slot", ErrCapability)
	}
	return nil
}

func (c *Capabilities) allows() string {
	if len(c.AllowedTargets) == 0 {
		return "any target (no AllowableValues)"
	}
	var ts []string
	for _, t := range c.AllowedTargets {
		if t != TargetNone {
			ts = append(ts, t)
		}
	}
	return "[" + strings.Join(ts, " ") + "]"
}

// notes say how the BMC's limits change the plan.
func (c *Capabilities) notes(p *Plan) []string {
	if c.ContinuousSupported || p.Policy == None {
		return nil
	}
	if p.Policy == NetworkBootAlways {
		return []string{"BMC does not support Continuous: each run re-applies the Once override before the boot"}
	}
	if p.Method != osimage.BootDisk {
		return []string{"BMC does not support Continuous: after the boot the override is cleared (Disabled), later boots follow the BIOS boot order"}
	}
	return nil
}

func resolve(id *osimage.BootIdentity, req Request) (*Plan, error) {
	if id == nil {
		return nil, fmt.Errorf("%w: no image identity", ErrPlan)
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	policy := req.policy()
	inst, err := resolveInstall(id, req.install())
	if err != nil {
		return nil, err
	}
	method := req.forced()
	if method == "" && inst != nil {
		method = osimage.BootPXE
	}
	if method == "" {
		method = id.Default
	}
	if method == "" {
		return nil, fmt.Errorf("%w: image declares no boot method", ErrPlan)
	}
	if inst == nil && method == osimage.BootDisk {
		// Disk boot boots what is installed: it needs nothing from the
		// image but its consent.
		if !slices.Contains(id.Methods, osimage.BootDisk) {
			return nil, fmt.Errorf("%w: image does not declare disk boot (declares %v)", ErrPlan, id.Methods)
		}
	} else if inst == nil {
		if err := id.Supports(method); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPlan, err)
		}
	}
	p := &Plan{Image: req.Image, Method: method, Policy: policy, Install: inst}
	if policy == None {
		// No override, no media, no artifacts: whatever the server boots.
		p.Steps = []Step{{Kind: StepPower}, {Kind: StepWaitEvidence}}
		return p, nil
	}
	network := method != osimage.BootDisk
	var base *url.URL
	if network {
		if req.ArtifactBaseURL == "" {
			return nil, fmt.Errorf("%w: method %s needs an artifact server URL", ErrPlan, method)
		}
		// Validate checked it.
		if base, err = artifactBase(req.ArtifactBaseURL); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRequest, err)
		}
	}
	once := &Override{Enabled: EnabledOnce, Mode: "UEFI"}
	switch method {
	case osimage.BootUEFIHTTP:
		uki := publish(base, id, osimage.KindUKI)
		once.Target, once.HTTPBootURI = TargetUefiHttp, uki.URL
		p.Steps = append(p.Steps,
			Step{Kind: StepCheckCapability, RequireTarget: TargetUefiHttp},
			Step{Kind: StepPublishArtifacts, Artifacts: []PublishedArtifact{uki}})
	case osimage.BootPXE:
		if inst != nil {
			arts, script := installerBoot(base, id, inst)
			once.Target = TargetPxe
			p.Steps = append(p.Steps,
				Step{Kind: StepCheckCapability, RequireTarget: TargetPxe},
				Step{Kind: StepPublishArtifacts, Artifacts: arts, Scripts: []Script{script}})
			break
		}
		kernel, initrd := publish(base, id, osimage.KindKernel), publish(base, id, osimage.KindInitrd)
		script := IPXEScript(base, kernel, initrd, id.Cmdline)
		once.Target = TargetPxe
		p.Steps = append(p.Steps,
			Step{Kind: StepCheckCapability, RequireTarget: TargetPxe},
			Step{Kind: StepPublishArtifacts, Artifacts: []PublishedArtifact{kernel, initrd}, Scripts: []Script{script}})
	case osimage.BootVirtualMedia:
		iso := publish(base, id, osimage.KindISO)
		once.Target = TargetCd
		p.Steps = append(p.Steps,
			Step{Kind: StepCheckCapability, RequireTarget: TargetCd, RequireVirtualMedia: true},
			Step{Kind: StepPublishArtifacts, Artifacts: []PublishedArtifact{iso}},
			Step{Kind: StepEjectMedia},
			Step{Kind: StepInsertMedia, MediaImage: iso.URL},
			Step{Kind: StepWaitMedia, MediaImage: iso.URL})
	case osimage.BootDisk:
		once.Target = TargetHdd
		p.Steps = append(p.Steps, Step{Kind: StepCheckCapability, RequireTarget: TargetHdd})
	}
	p.Steps = append(p.Steps, Step{Kind: StepSetOverride, Override: once}, Step{Kind: StepPower}, Step{Kind: StepWaitEvidence})
	if policy == NetworkBootOnce && network {
		// Every later boot goes to disk, also on BMCs that keep a Once
		// override forever; the driver falls back to Disabled where
		// Continuous is unsupported.
		p.Steps = append(p.Steps, Step{Kind: StepPinDisk, Override: &Override{Target: TargetHdd, Enabled: EnabledContinuous, Mode: "UEFI"}})
	}
	return p, nil
}

// resolveInstall checks a non-default install mode (Request.install,
// validated) against the image; nil stays nil, the default (memory, root
// inside the initrd).
func resolveInstall(id *osimage.BootIdentity, in *Install) (*Install, error) {
	if in == nil {
		return nil, nil
	}
	need := []osimage.ArtifactKind{osimage.KindKernel, osimage.KindInitrdNoRoot, osimage.KindRootfs}
	if in.Mode == osimage.InstallDisk {
		need = []osimage.ArtifactKind{osimage.KindKernel, osimage.KindInitrdNoRoot, osimage.KindDisk}
	}
	if len(id.InstallModes) > 0 && !slices.Contains(id.InstallModes, in.Mode) {
		return nil, fmt.Errorf("%w: image does not offer install mode %s (offers %v)", ErrPlan, in.Mode, id.InstallModes)
	}
	var missing []string
	for _, k := range need {
		if _, ok := id.Artifact(k); !ok {
			missing = append(missing, string(k))
		}
	}
	if len(missing) > 0 {
		var have []string
		for _, k := range id.Kinds() {
			have = append(have, string(k))
		}
		return nil, fmt.Errorf("%w: install mode %s needs %s in the image, missing %s: it has %s", ErrPlan, in,
			joinKinds(need), strings.Join(missing, ", "), strings.Join(have, ", "))
	}
	return in, nil
}

func joinKinds(ks []osimage.ArtifactKind) string {
	var s []string
	for _, k := range ks {
		s = append(s, string(k))
	}
	return strings.Join(s, "+")
}

// installerBoot publishes kernel, the initrd without root image and the
// payload the init fetches (disk image or root image), and renders the iPXE
// script whose command line tells the init what to do with it. BOOTIF names
// the NIC iPXE booted from, so the init's DHCP tries it first.
func installerBoot(base *url.URL, id *osimage.BootIdentity, in *Install) ([]PublishedArtifact, Script) {
	kernel, initrd := publish(base, id, osimage.KindKernel), publish(base, id, osimage.KindInitrdNoRoot)
	args := []string{strings.TrimSpace(id.Cmdline)}
	var payload PublishedArtifact
	if in.Mode == osimage.InstallDisk {
		payload = publish(base, id, osimage.KindDisk)
		args = append(args, cmdline.Cmdline{Mode: cmdline.ModeInstall, InstallImage: payload.URL,
			InstallSHA256: strings.TrimPrefix(payload.Digest, "sha256:"), InstallTarget: in.Target, InstallWipe: in.Wipe}.String())
	} else {
		payload = publish(base, id, osimage.KindRootfs)
		args = append(args, cmdline.Cmdline{Mode: cmdline.ModeMemory, Root: payload.URL, RootSHA256: strings.TrimPrefix(payload.Digest, "sha256:")}.String())
	}
	args = append(args, "BOOTIF=01-${netX/mac:hexhyp}")
	return []PublishedArtifact{kernel, initrd, payload}, IPXEScript(base, kernel, initrd, strings.Join(args, " "))
}

// ArtifactURL is where an artifact server with the given base URL serves a
// blob: content-addressed, ending in the artifact's file name (so .efi/.iso
// extensions survive for firmware that looks at them).
func ArtifactURL(base *url.URL, digest, name string) string {
	return base.JoinPath("blobs", digest, name).String()
}

func publish(base *url.URL, id *osimage.BootIdentity, kind osimage.ArtifactKind) PublishedArtifact {
	a := artifactOf(id, kind)
	return PublishedArtifact{Artifact: a, URL: ArtifactURL(base, a.Digest, a.Name)}
}

// IPXEScript renders the iPXE script booting kernel+initrd with the command
// line passed explicitly. Its URL is derived from its content.
func IPXEScript(base *url.URL, kernel, initrd PublishedArtifact, cmdline string) Script {
	var b strings.Builder
	b.WriteString("#!ipxe\n")
	fmt.Fprintf(&b, "kernel %s initrd=%s", kernel.URL, initrd.Name)
	if cmdline = strings.TrimSpace(cmdline); cmdline != "" {
		b.WriteString(" " + cmdline)
	}
	fmt.Fprintf(&b, "\ninitrd %s\nboot\n", initrd.URL)
	sum := sha256.Sum256([]byte(b.String()))
	name := hex.EncodeToString(sum[:8]) + ".ipxe"
	return Script{Name: name, URL: base.JoinPath("ipxe", name).String(), Content: b.String()}
}

// WriteText prints the plan for humans (dry run).
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "image:  %s\nmethod: %s", p.Image, p.Method)
	if p.Choice != "" {
		fmt.Fprintf(&b, " (%s)", p.Choice)
	}
	fmt.Fprintf(&b, "\npolicy: %s\n", p.Policy)
	if p.Architecture != "" || p.ArchitectureFrom != "" {
		fmt.Fprintf(&b, "arch:   %s (%s)\n", cmp.Or(p.Architecture, "any"), p.ArchitectureFrom)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "note:   %s\n", n)
	}
	if p.Install != nil {
		fmt.Fprintf(&b, "install: %s\n", p.Install)
	}
	for i, s := range p.Steps {
		fmt.Fprintf(&b, "%2d. %s", i+1, s.Kind)
		switch s.Kind {
		case StepPublishArtifacts:
			for _, a := range s.Artifacts {
				fmt.Fprintf(&b, "\n      %s %s (%s, %d bytes)", a.Kind, a.URL, a.Digest, a.Size)
			}
			for _, sc := range s.Scripts {
				fmt.Fprintf(&b, "\n      script %s\n        %s", sc.URL, strings.ReplaceAll(strings.TrimSpace(sc.Content), "\n", "\n        "))
			}
		case StepCheckCapability:
			fmt.Fprintf(&b, ": target %s allowed", s.RequireTarget)
			if s.RequireVirtualMedia {
				b.WriteString(", virtual media CD slot present")
			}
		case StepSetOverride, StepPinDisk:
			fmt.Fprintf(&b, ": %s %s", s.Override.Target, s.Override.Enabled)
			if s.Override.HTTPBootURI != "" {
				fmt.Fprintf(&b, " HttpBootUri=%s", s.Override.HTTPBootURI)
			}
		case StepInsertMedia, StepWaitMedia:
			fmt.Fprintf(&b, ": %s", s.MediaImage)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Digest identifies a plan, so a saved State is only resumed for the plan it
// was made for.
func (p *Plan) Digest() string {
	b, _ := json.Marshal(p)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
