package boot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/osimage"
)

// sessionBMC records the calls that read capabilities or change something.
type sessionBMC struct {
	caps     Capabilities
	capsErr  error
	resetErr error
	override Override
	calls    []string
}

func (b *sessionBMC) Capabilities(context.Context) (Capabilities, error) {
	b.calls = append(b.calls, "capabilities")
	return b.caps, b.capsErr
}
func (b *sessionBMC) BootOverride(context.Context) (Override, error) { return b.override, nil }
func (b *sessionBMC) SetBootOverride(_ context.Context, o Override) error {
	b.calls = append(b.calls, "set "+o.Target+"/"+o.Enabled)
	b.override = o
	return nil
}
func (b *sessionBMC) Media(context.Context) (Media, error) { return Media{}, nil }
func (b *sessionBMC) InsertMedia(_ context.Context, image string) error {
	b.calls = append(b.calls, "insert")
	return nil
}
func (b *sessionBMC) EjectMedia(context.Context) error {
	b.calls = append(b.calls, "eject")
	return nil
}
func (b *sessionBMC) PowerState(context.Context) (string, error) { return "Off", nil }
func (b *sessionBMC) Reset(_ context.Context, resetType string) error {
	b.calls = append(b.calls, "reset "+resetType)
	return b.resetErr
}

// sessionPublisher counts what a Serve hook handed the driver.
type sessionPublisher struct{ artifacts int }

func (p *sessionPublisher) Publish(_ context.Context, a []PublishedArtifact, _ []Script) error {
	p.artifacts += len(a)
	return nil
}

// sessionDialer opens a test BMC, or fails; it counts the dials.
type sessionDialer struct {
	bmc    BMC
	err    error
	closed bool
	dials  int
}

func (d *sessionDialer) DialBMC(context.Context) (BMC, func(), error) {
	d.dials++
	if d.err != nil {
		return nil, nil, d.err
	}
	return d.bmc, func() { d.closed = true }, nil
}

// sessionArtifacts is an ArtifactServer: a base URL or its error, and a
// serve hook.
type sessionArtifacts struct {
	baseErr error
	serve   func(p *Plan, d *Driver) error
}

func (a sessionArtifacts) BaseURL() (string, error) {
	if a.baseErr != nil {
		return "", a.baseErr
	}
	return "http://10.0.0.5:8080", nil
}

func (a sessionArtifacts) Serve(_ context.Context, p *Plan, d *Driver) error {
	if a.serve == nil {
		return nil
	}
	return a.serve(p, d)
}

// TestSessionBoot: the session's order (image before BMC, capabilities
// before serving, serving before driving) and how each hook's outcome
// shows in the result and the error.
func TestSessionBoot(t *testing.T) {
	full := fullIdentity(t) // uefi-http (default), pxe, virtual-media, disk
	diskFirst, err := identity(t, map[string]string{osimage.AnnotationBootMethods: "disk,uefi-http", osimage.AnnotationBootDefault: "disk"},
		osimage.MediaTypeUKI, osimage.MediaTypeDisk)
	if err != nil {
		t.Fatal(err)
	}
	all := Capabilities{ContinuousSupported: true, VirtualMediaCD: true}
	pxeOnly := Capabilities{AllowedTargets: []string{TargetPxe, TargetHdd}, ContinuousSupported: true}
	noURL := errors.New("no artifact URL: --artifact-advertise is required")
	tests := []struct {
		name       string
		id         *osimage.BootIdentity
		req        Request
		caps       Capabilities
		skipNone   bool
		baseErr    error // the ArtifactBaseURL hook's
		connectErr error
		capsErr    error
		serveErr   error
		resetErr   error
		wantErr    string // "" for success
		wantIs     []error
		wantNotIs  []error
		wantMethod osimage.BootMethod // the plan that ran; "" for none
		wantCalls  []string
		wantServed bool
		wantLog    string
	}{
		{name: "auto takes the image's first choice", id: full, caps: all, wantMethod: osimage.BootUEFIHTTP, wantServed: true,
			wantCalls: []string{"capabilities", "capabilities", "set UefiHttp/Once", "reset On", "set Hdd/Continuous"},
			wantLog:   "method uefi-http (image's first choice; BMC allows any target (no AllowableValues))"},
		{name: "auto passes over what the BMC lacks", id: full, caps: pxeOnly, wantMethod: osimage.BootPXE, wantServed: true,
			wantCalls: []string{"capabilities", "capabilities", "set Pxe/Once", "reset On", "set Hdd/Continuous"},
			wantLog:   "method pxe (image prefers uefi-http; BMC allows [Pxe Hdd])"},
		{name: "image mismatch: no BMC call", id: diskFirst, req: Request{Method: osimage.BootPXE}, caps: all,
			wantErr: "image offers no kernel+initrd for pxe", wantIs: []error{ErrPlan}, wantNotIs: []error{ErrBMC}},
		{name: "forced method the BMC lacks: refused before serving", id: full, req: Request{Method: osimage.BootUEFIHTTP}, caps: pxeOnly,
			wantErr: "method uefi-http: BMC capability: BMC offers no UefiHttp boot target", wantIs: []error{ErrCapability}, wantNotIs: []error{ErrBMC},
			wantCalls: []string{"capabilities"}},
		{name: "disk boot: no artifact URL needed, nothing served", id: diskFirst, caps: all, baseErr: noURL, wantMethod: osimage.BootDisk,
			wantCalls: []string{"capabilities", "capabilities", "set Hdd/Once", "reset On"}},
		{name: "network boot without artifact URL: the hook's error, no BMC call", id: full, caps: all, baseErr: noURL,
			wantErr: noURL.Error(), wantIs: []error{noURL}, wantNotIs: []error{ErrBMC}},
		{name: "connect fails", id: full, connectErr: errors.New("connection refused"),
			wantErr: "connection refused", wantIs: []error{ErrBMC}},
		{name: "capabilities fail", id: full, capsErr: errors.New("500"),
			wantErr: "reading BMC capabilities: 500", wantIs: []error{ErrBMC}, wantCalls: []string{"capabilities"}},
		{name: "serving fails: the BMC is left alone", id: full, caps: all, serveErr: errors.New("address already in use"),
			wantErr: "address already in use", wantNotIs: []error{ErrBMC}, wantCalls: []string{"capabilities"}},
		{name: "run fails: the plan that ran comes back", id: full, caps: all, resetErr: errors.New("reset refused"), wantMethod: osimage.BootUEFIHTTP, wantServed: true,
			wantErr: "step 4 (power-on-or-restart): reset refused", wantIs: []error{ErrBMC},
			wantCalls: []string{"capabilities", "capabilities", "set UefiHttp/Once", "reset On"}},
		{name: "policy None checks capabilities", id: full, req: Request{Method: osimage.BootUEFIHTTP, Policy: None}, caps: pxeOnly,
			wantErr: "BMC offers no UefiHttp boot target", wantIs: []error{ErrCapability}, wantCalls: []string{"capabilities"}},
		{name: "policy None skipping capabilities powers on", id: full, req: Request{Method: osimage.BootUEFIHTTP, Policy: None}, caps: pxeOnly, skipNone: true,
			wantMethod: osimage.BootUEFIHTTP, wantCalls: []string{"reset On"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bmc := &sessionBMC{caps: tc.caps, capsErr: tc.capsErr, resetErr: tc.resetErr}
			pub := &sessionPublisher{}
			var logs []string
			template := &Driver{}
			served := false
			s := &Session{
				Request: tc.req,
				Images:  KnownBuilds{tc.id},
				Artifacts: sessionArtifacts{baseErr: tc.baseErr, serve: func(p *Plan, d *Driver) error {
					served = true
					if tc.serveErr != nil {
						return tc.serveErr
					}
					d.Publisher = pub
					return nil
				}},
				Dialer:                  &sessionDialer{bmc: bmc, err: tc.connectErr},
				Driver:                  template,
				Logf:                    func(f string, a ...any) { logs = append(logs, fmt.Sprintf(f, a...)) },
				SkipCapabilitiesForNone: tc.skipNone,
			}
			st := &State{}
			res, err := s.Boot(context.Background(), st)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Boot: %v, want error %q", err, tc.wantErr)
			}
			for _, e := range tc.wantIs {
				if !errors.Is(err, e) {
					t.Errorf("error %v is not %v", err, e)
				}
			}
			for _, e := range tc.wantNotIs {
				if errors.Is(err, e) {
					t.Errorf("error %v is %v", err, e)
				}
			}
			if got := ""; res.Plan != nil {
				got = string(res.Plan.Method)
				if got != string(tc.wantMethod) {
					t.Errorf("ran %s, want %q", got, tc.wantMethod)
				}
			} else if tc.wantMethod != "" {
				t.Errorf("no plan ran, want %s", tc.wantMethod)
			}
			if !slices.Equal(bmc.calls, tc.wantCalls) {
				t.Errorf("BMC calls %q, want %q", bmc.calls, tc.wantCalls)
			}
			if published := pub.artifacts > 0; published != tc.wantServed {
				t.Errorf("published %d artifacts, want some: %t", pub.artifacts, tc.wantServed)
			}
			if served && res.Plan != nil && res.Plan.Method == osimage.BootDisk {
				t.Error("Serve was called for a disk boot")
			}
			if template.Publisher != nil {
				t.Error("Serve changed the caller's Driver, not the session's copy")
			}
			if tc.wantLog != "" && !slices.Contains(logs, tc.wantLog) {
				t.Errorf("log %q, want %q", logs, tc.wantLog)
			}
		})
	}
}

// TestSessionSkipsFinishedBoot: a second Boot with the state of the first
// changes nothing on the BMC and says so; NetworkBootAlways boots again.
func TestSessionSkipsFinishedBoot(t *testing.T) {
	id := fullIdentity(t)
	for _, tc := range []struct {
		policy      Policy
		wantSkipped bool
	}{
		{NetworkBootOnce, true},
		{NetworkBootAlways, false},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			bmc := &sessionBMC{caps: Capabilities{ContinuousSupported: true}}
			s := &Session{
				Request: Request{Policy: tc.policy, ArtifactBaseURL: "http://10.0.0.5:8080"},
				Images:  KnownBuilds{id},
				Dialer:  OpenedBMC{bmc},
			}
			st := &State{}
			if res, err := s.Boot(context.Background(), st); err != nil || res.Skipped {
				t.Fatalf("first Boot: %+v, %v", res, err)
			}
			bmc.calls = nil
			res, err := s.Boot(context.Background(), st)
			if err != nil || res.Skipped != tc.wantSkipped {
				t.Fatalf("second Boot: skipped %t, %v; want skipped %t", res.Skipped, err, tc.wantSkipped)
			}
			if changed := slices.ContainsFunc(bmc.calls, func(c string) bool { return c != "capabilities" }); changed == tc.wantSkipped {
				t.Errorf("second Boot's BMC calls %q", bmc.calls)
			}
		})
	}
}

// TestSessionPlan: without a Dialer the plan is the image's alone; with it,
// the BMC's capabilities choose, and nothing on the BMC changes.
func TestSessionPlan(t *testing.T) {
	id := fullIdentity(t)
	bmc := &sessionBMC{caps: Capabilities{AllowedTargets: []string{TargetPxe}, ContinuousSupported: true}}
	s := &Session{
		Request: Request{ArtifactBaseURL: "http://10.0.0.5:8080"},
		Images:  KnownBuilds{id},
	}
	p, err := s.Plan(context.Background())
	if err != nil || p.Method != osimage.BootUEFIHTTP || p.Choice != "" {
		t.Fatalf("image-only plan: %+v, %v; want the image's default, no choice", p, err)
	}
	dialer := &sessionDialer{bmc: bmc}
	s.Dialer = dialer
	p, err = s.Plan(context.Background())
	if err != nil || p.Method != osimage.BootPXE {
		t.Fatalf("BMC plan: %+v, %v; want pxe", p, err)
	}
	if !slices.Equal(bmc.calls, []string{"capabilities"}) || !dialer.closed {
		t.Errorf("BMC calls %q, closed %t; want capabilities only, then closed", bmc.calls, dialer.closed)
	}
	if _, err := (&Session{Images: s.Images}).Boot(context.Background(), &State{}); !errors.Is(err, ErrRequest) {
		t.Errorf("Boot without a Dialer: %v, want ErrRequest", err)
	}
}

// countingImages counts the reads of an image.
type countingImages struct {
	KnownBuilds
	reads int
}

func (c *countingImages) Builds(ctx context.Context, image string) ([]*osimage.BootIdentity, error) {
	c.reads++
	return c.KnownBuilds.Builds(ctx, image)
}

// TestSessionValidatesFirst: a request wrong on its own is ErrRequest
// (also ErrPlan) from Plan and Boot before the image is read or the BMC
// dialled; so is a forced network boot without an artifact server URL.
func TestSessionValidatesFirst(t *testing.T) {
	noURL := errors.New("no artifact URL")
	for _, tc := range []struct {
		name    string
		req     Request
		baseErr error
		want    error
	}{
		{"unknown policy", Request{Policy: "Once"}, nil, ErrRequest},
		{"unknown method", Request{Method: "floppy"}, nil, ErrRequest},
		{"unknown install mode", Request{Install: Install{Mode: "tape"}}, nil, ErrRequest},
		{"disk install without target", Request{Install: Install{Mode: osimage.InstallDisk}}, nil, ErrRequest},
		{"wipe in memory mode", Request{Install: Install{Wipe: true}}, nil, ErrRequest},
		{"install over virtual media", Request{Install: Install{Mode: osimage.InstallDisk, Target: "serial:x"}, Method: osimage.BootVirtualMedia}, nil, ErrRequest},
		{"unknown architecture", Request{Architecture: "aarch64"}, nil, ErrRequest},
		{"forced pxe without artifact URL", Request{Method: osimage.BootPXE}, noURL, noURL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			images := &countingImages{KnownBuilds: KnownBuilds{fullIdentity(t)}}
			dialer := &sessionDialer{bmc: &sessionBMC{}}
			s := &Session{Request: tc.req, Images: images, Dialer: dialer, Artifacts: sessionArtifacts{baseErr: tc.baseErr}}
			_, planErr := s.Plan(t.Context())
			_, bootErr := s.Boot(t.Context(), &State{})
			for _, err := range []error{planErr, bootErr} {
				if !errors.Is(err, tc.want) || tc.want == ErrRequest && !errors.Is(err, ErrPlan) {
					t.Errorf("err = %v, want %v (and ErrPlan)", err, tc.want)
				}
			}
			if images.reads != 0 || dialer.dials != 0 {
				t.Errorf("%d image reads, %d BMC dials before the request was refused", images.reads, dialer.dials)
			}
		})
	}
}
