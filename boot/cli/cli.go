// Package cli is the serverboot command line: plan, boot, status, eject. It
// only wires flags to the boot, boot/redfish and boot/artifacts libraries.
package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/boot/artifacts"
	"github.com/ironcore-dev/os-builder/boot/redfish"
	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/osimage"
)

// Exit codes: the family's table (internal/exitcode, README "Exit codes").
// They are part of the interface: scripts branch on them.
const (
	ExitOK       = exitcode.OK
	ExitUsage    = exitcode.Usage       // bad flags or arguments, an invalid --state file
	ExitMismatch = exitcode.Mismatch    // the plan cannot be carried out: image lacks the artifacts, BMC lacks the capability
	ExitBMC      = exitcode.Unavailable // the BMC (or the registry) failed or was unreachable
	ExitTimeout  = exitcode.Timeout     // a wait ran out (media insertion, boot evidence, --timeout)
)

type options struct {
	bmc, image, method, policy      string
	arch                            string
	auth                            string
	install, installTarget          string
	installWipe, rootURL            bool
	listen, advertise, cacheDir     string
	stateFile, credentialsFile      string
	jsonOut, insecureSkipVerify     bool
	insecureRegistry, basicAuth     bool
	timeout, evidenceTimeout, serve time.Duration
	stdout, stderr                  io.Writer
}

// Run executes serverboot with args and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(&options{stdout: stdout, stderr: stderr})
	root.SetOut(stdout)
	root.SetErr(stderr)
	return icli.Execute(ctx, root, args, stderr, "")
}

// Command returns the serverboot command tree, for tests and documentation
// checks that walk it; Run runs it.
func Command(stdout, stderr io.Writer) *cobra.Command {
	return newRoot(&options{stdout: stdout, stderr: stderr})
}

// newRoot builds the command tree. Each command has the flags it uses and
// no others: a flag a command would ignore is an unknown flag (exit 2).
func newRoot(o *options) *cobra.Command {
	root := &cobra.Command{
		Use:   "serverboot",
		Short: "Boot a server through its BMC the way its image says it boots",
		Long:  "Boot a server through its BMC the way its image says it boots.\n\n" + exitcode.Help(),
	}
	planCmd := &cobra.Command{Use: "plan --image REF [--bmc URL]", Short: "Print the boot plan (dry run: without --bmc no BMC call, with it read-only ones)",
		Args: icli.ExactArgs(0), RunE: o.bounded(o.plan)}
	o.imageFlags(planCmd.Flags())
	o.bmcFlags(planCmd.Flags())
	o.timeoutFlag(planCmd.Flags(), 2*time.Minute)
	icli.JSONFlag(planCmd, &o.jsonOut)

	bootCmd := &cobra.Command{Use: "boot --bmc URL --image REF", Short: "Boot the server", Args: icli.ExactArgs(0),
		RunE: o.bounded(o.boot)}
	o.imageFlags(bootCmd.Flags())
	o.bmcFlags(bootCmd.Flags())
	o.timeoutFlag(bootCmd.Flags(), 30*time.Minute)
	o.stateFlag(bootCmd.Flags())
	bf := bootCmd.Flags()
	// Not --cache-dir: that is builder's step cache, another cache with
	// another default.
	bf.StringVar(&o.cacheDir, "artifact-cache-dir", "", "artifact blob cache directory, private to you: 0700, your own (default $XDG_CACHE_HOME/os-builder/artifacts or ~/.cache/os-builder/artifacts)")
	icli.Alias(bf, "cache-dir", "artifact-cache-dir")
	icli.DurationFlag(bf, &o.evidenceTimeout, "evidence-timeout", 10*time.Minute, "how long to wait for the machine to fetch its boot file")
	icli.DurationFlag(bf, &o.serve, "serve-after-boot", 10*time.Minute, "keep serving artifacts this long after the boot (kernel, initrd, root image are fetched late)")
	icli.JSONFlag(bootCmd, &o.jsonOut)

	statusCmd := &cobra.Command{Use: "status --bmc URL", Short: "Show BMC boot state and saved conditions", Args: icli.ExactArgs(0),
		RunE: o.bounded(o.status)}
	o.bmcFlags(statusCmd.Flags())
	o.timeoutFlag(statusCmd.Flags(), 2*time.Minute)
	o.stateFlag(statusCmd.Flags())
	icli.JSONFlag(statusCmd, &o.jsonOut)

	ejectCmd := &cobra.Command{Use: "eject --bmc URL", Short: "Eject virtual media", Args: icli.ExactArgs(0),
		RunE: o.bounded(o.eject)}
	o.bmcFlags(ejectCmd.Flags())
	o.timeoutFlag(ejectCmd.Flags(), 2*time.Minute)

	root.AddCommand(planCmd, bootCmd, statusCmd, ejectCmd)
	return root
}

// imageFlags are the flags of commands that read the image and plan.
func (o *options) imageFlags(f *pflag.FlagSet) {
	f.StringVar(&o.image, "image", "", "image reference (registry/repo:tag or @sha256:...)")
	icli.InsecureFlag(f, &o.insecureRegistry)
	icli.Alias(f, "insecure-registry", "insecure")
	f.StringVar(&o.method, "method", string(boot.MethodAuto), "auto: the image's first method the BMC allows; or force one (refused, not replaced, if the BMC cannot): uefi-http, pxe, virtual-media, disk")
	f.StringVar(&o.policy, "policy", string(boot.NetworkBootOnce), "NetworkBootOnce, NetworkBootAlways or None")
	f.StringVar(&o.arch, "arch", "", "the server's architecture (amd64, arm64, ...), which picks the image's build; default: what the BMC's Processors report (InstructionSet), else the image's only build")
	f.StringVar(&o.install, "install", "", "install mode: memory (default: run from RAM) or disk (write the image to --install-target, then boot it); boots via pxe")
	f.StringVar(&o.installTarget, "install-target", "", "target disk selector for --install disk: by-id:ID, serial:S, path:/dev/NAME, size:MIN-MAX")
	f.BoolVar(&o.installWipe, "install-wipe", false, "let --install disk overwrite a foreign partition table")
	f.BoolVar(&o.rootURL, "root-url", false, "memory mode: fetch the root image from the artifact server (pxe, initrd without root image)")
	f.StringVar(&o.listen, "artifact-listen", ":8080", "address the artifact server listens on")
	f.StringVar(&o.advertise, "artifact-advertise", "", "base URL machines reach the artifact server at (default: from --artifact-listen)")
}

// bmcFlags are the flags of commands that talk to the BMC.
func (o *options) bmcFlags(f *pflag.FlagSet) {
	f.StringVar(&o.bmc, "bmc", "", "BMC Redfish endpoint (https://bmc.example)")
	f.StringVar(&o.credentialsFile, "credentials-file", "", "BMC credentials JSON {\"username\",\"password\"} (default: $"+redfish.EnvUsername+", $"+redfish.EnvPassword+")")
	f.StringVar(&o.auth, "auth", string(redfish.AuthAuto), "BMC auth: auto (a Redfish session, else basic auth where the BMC has no session service, refuses sessions or gives no X-Auth-Token; said once on stderr), session or basic")
	f.BoolVar(&o.basicAuth, "basic-auth", false, "same as --auth basic")
	f.BoolVar(&o.insecureSkipVerify, "insecure-skip-verify", false, "do not verify the BMC's TLS certificate (labs only)")
}

func (o *options) timeoutFlag(f *pflag.FlagSet, def time.Duration) {
	icli.DurationFlag(f, &o.timeout, "timeout", def, "overall timeout of the command, BMC calls, registry fetch and task monitors included")
}

func (o *options) stateFlag(f *pflag.FlagSet) {
	f.StringVar(&o.stateFile, "state", "", "boot state file (JSON); a re-run resumes from it")
}

// ExitCode maps an error to the documented exit codes.
func ExitCode(err error) int { return exitcode.Of(classify(err)) }

// classify marks the boot library's errors with their exit codes.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, boot.ErrInvalidState), errors.Is(err, boot.ErrRequest):
		return exitcode.UsageError(err)
	case errors.Is(err, boot.ErrPlan), errors.Is(err, boot.ErrCapability):
		return exitcode.MismatchError(err)
	case errors.Is(err, boot.ErrTimeout):
		return exitcode.TimeoutError(err)
	case errors.Is(err, boot.ErrBMC):
		return exitcode.UnavailableError(err)
	}
	return err
}

// bmcError marks an error of talking to the BMC: unavailable, unless
// something inside says more (a timeout, a missing capability).
func bmcError(err error) error {
	if err == nil {
		return nil
	}
	return exitcode.UnavailableError(err)
}

// bounded runs a command under --timeout: every BMC call, registry fetch
// and wait of the command ends by then.
func (o *options) bounded(run func(context.Context) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if o.timeout <= 0 {
			return exitcode.UsageError(fmt.Errorf("--timeout %s: want more than 0", o.timeout))
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
		defer cancel()
		return classify(run(ctx))
	}
}

func (o *options) need(flags ...string) error {
	for _, f := range flags {
		var v string
		switch f {
		case "bmc":
			v = o.bmc
		case "image":
			v = o.image
		}
		if v == "" {
			return exitcode.UsageError(fmt.Errorf("--%s is required", f))
		}
	}
	return nil
}

func (o *options) advertiseURL() (string, error) {
	if o.advertise != "" {
		return o.advertise, nil
	}
	host, port, err := net.SplitHostPort(o.listen)
	if err != nil {
		return "", exitcode.UsageError(fmt.Errorf("--artifact-listen %q: %w", o.listen, err))
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		return "", exitcode.UsageError(errors.New("--artifact-advertise is required when --artifact-listen binds all addresses"))
	}
	// A link-local address is only reachable with this host's zone
	// (fe80::1%eth0), which means nothing to the machine.
	if a, err := netip.ParseAddr(host); err == nil && (a.Zone() != "" || a.IsLinkLocalUnicast()) {
		return "", exitcode.UsageError(fmt.Errorf("--artifact-advertise is required when --artifact-listen is link-local (%s): machines cannot use this host's zone", host))
	}
	return "http://" + net.JoinHostPort(host, port), nil
}

// session is the boot session the image flags describe; plan and boot add
// the BMC. Flags that are wrong on their own fail here or in the session's
// own check, before any registry or BMC request.
func (o *options) session() (*boot.Session, *artifactServer, error) {
	if err := o.need("image"); err != nil {
		return nil, nil, err
	}
	if o.arch != "" {
		if err := boot.CheckArchitecture(o.arch); err != nil {
			return nil, nil, exitcode.UsageError(fmt.Errorf("--arch: %w", err))
		}
	}
	ref, err := icli.ParseReference("--image", o.image, o.insecureRegistry)
	if err != nil {
		return nil, nil, err
	}
	var nopts []name.Option
	if o.insecureRegistry {
		nopts = append(nopts, name.Insecure)
	}
	arts := &artifactServer{o: o, ref: ref}
	return &boot.Session{
		Request: boot.Request{Image: ref.String(), Method: osimage.BootMethod(o.method), Policy: boot.Policy(o.policy),
			Install:      boot.Install{Mode: osimage.InstallMode(o.install), Target: o.installTarget, Wipe: o.installWipe, RootURL: o.rootURL},
			Architecture: o.arch, ArchitectureFrom: "--arch"},
		// Parsed as above: it keeps --insecure.
		Images:    boot.Registry{Name: nopts},
		Artifacts: arts,
	}, arts, nil
}

// artifactServer serves one boot's artifacts on --artifact-listen, at
// --artifact-advertise; it outlives the command's context by
// --serve-after-boot (the kernel, initrd and root image are fetched after
// the boot file).
type artifactServer struct {
	o   *options
	ref name.Reference
	// ctx bounds the serving; served gets its end (nil until Serve).
	ctx    context.Context
	served chan error
}

// BaseURL carries this boot's token: only a client that got the URLs from
// the plan counts as the machine (FetchEvidence).
func (a *artifactServer) BaseURL() (string, error) {
	base, err := a.o.advertiseURL()
	if err != nil {
		return "", err
	}
	return artifacts.BootURL(base, a.o.cacheDir, a.o.bmc+"\x00"+a.ref.String())
}

func (a *artifactServer) Serve(_ context.Context, _ *boot.Plan, d *boot.Driver) error {
	base, _ := a.o.advertiseURL() // the plan publishes, so the session had one
	srv, err := artifacts.NewServer(artifacts.RegistrySource{Repo: a.ref.Context(),
		Options: []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}}, a.o.cacheDir, base)
	if err != nil {
		return err
	}
	srv.Logf = a.o.logf
	d.Publisher, d.Evidence = srv, srv.FetchEvidence()
	// Bound before the BMC is driven: a port in use fails here, and the
	// firmware never asks an address nobody listens on.
	ln, err := net.Listen("tcp", a.o.listen)
	if err != nil {
		return fmt.Errorf("artifact server: %w", err)
	}
	a.served = make(chan error, 1)
	go func() { a.served <- srv.Serve(a.ctx, ln) }()
	return nil
}

func (o *options) plan(ctx context.Context) error {
	s, _, err := o.session()
	if err != nil {
		return err
	}
	if o.bmc != "" {
		// With a BMC the plan is the one boot would run: read-only calls.
		if s.Dialer, err = o.dialer(); err != nil {
			return err
		}
	}
	p, err := s.Plan(ctx)
	if err != nil {
		return err
	}
	if o.jsonOut {
		return icli.WriteJSON(o.stdout, p)
	}
	return p.WriteText(o.stdout)
}

// dialer is the BMC the flags name, with its credentials and auth: all
// checked here, before any request.
func (o *options) dialer() (redfishDialer, error) {
	if err := o.need("bmc"); err != nil {
		return redfishDialer{}, err
	}
	var creds redfish.Credentials
	var err error
	if o.credentialsFile != "" {
		creds, err = redfish.CredentialsFromFile(o.credentialsFile)
	} else {
		creds, err = redfish.CredentialsFromEnv()
	}
	if err != nil {
		return redfishDialer{}, exitcode.UsageError(err)
	}
	auth, err := redfish.ParseAuth(o.auth)
	if err != nil {
		return redfishDialer{}, exitcode.UsageError(fmt.Errorf("--auth: %w", err))
	}
	if o.basicAuth {
		auth = redfish.AuthBasic
	}
	return redfishDialer{redfish.Dialer{Config: redfish.Config{Endpoint: o.bmc, Credentials: creds, InsecureSkipVerify: o.insecureSkipVerify, Auth: auth, Logf: o.logf}}}, nil
}

// redfishDialer is redfish.Dialer whose failures are the BMC's
// (bmcError).
type redfishDialer struct{ redfish.Dialer }

func (d redfishDialer) connect(ctx context.Context) (*redfish.Client, error) {
	c, err := redfish.Connect(ctx, d.Config)
	return c, bmcError(err)
}

func (d redfishDialer) DialBMC(ctx context.Context) (boot.BMC, func(), error) {
	bmc, closeBMC, err := d.Dialer.DialBMC(ctx)
	return bmc, closeBMC, bmcError(err)
}

// connect opens the BMC of status and eject.
func (o *options) connect(ctx context.Context) (*redfish.Client, error) {
	d, err := o.dialer()
	if err != nil {
		return nil, err
	}
	return d.connect(ctx)
}

func (o *options) logf(format string, args ...any) { fmt.Fprintf(o.stderr, format+"\n", args...) }

func (o *options) boot(ctx context.Context) error {
	s, arts, err := o.session()
	if err != nil {
		return err
	}
	if s.Dialer, err = o.dialer(); err != nil {
		return err
	}
	st := &boot.State{}
	d := &boot.Driver{EvidenceTimeout: o.evidenceTimeout}
	if o.stateFile != "" {
		if st, err = boot.LoadState(o.stateFile); err != nil {
			return err
		}
		d.Persist = func(s *boot.State) error { return boot.SaveState(o.stateFile, s) }
	}
	s.Driver, s.Logf = d, o.logf
	var stopServing context.CancelFunc
	arts.ctx, stopServing = context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	res, err := s.Boot(ctx, st)
	if res.Plan != nil { // the plan ran: say what it saw, also when it failed
		if o.jsonOut {
			_ = icli.WriteJSON(o.stdout, st)
		} else {
			writeConditions(o.stdout, st)
		}
	}
	if err != nil {
		return err
	}
	if res.Skipped {
		fmt.Fprintln(o.stderr, "nothing to do: the state says this server already booted the image (a fresh --state re-provisions)")
		return nil
	}
	if arts.served != nil {
		fmt.Fprintf(o.stderr, "serving artifacts for %s more (Ctrl-C to stop)\n", o.serve)
		select {
		case <-time.After(o.serve):
		case <-ctx.Done():
		case err := <-arts.served:
			return err
		}
	}
	return nil
}

func (o *options) status(ctx context.Context) error {
	bmc, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer bmc.Close()
	out := struct {
		PowerState   string            `json:"powerState"`
		Override     boot.Override     `json:"override"`
		Media        *boot.Media       `json:"media,omitempty"`
		Capabilities boot.Capabilities `json:"capabilities"`
		Conditions   []boot.Condition  `json:"conditions,omitempty"`
	}{}
	if out.PowerState, err = bmc.PowerState(ctx); err != nil {
		return bmcError(err)
	}
	if out.Override, err = bmc.BootOverride(ctx); err != nil {
		return bmcError(err)
	}
	if out.Capabilities, err = bmc.Capabilities(ctx); err != nil {
		return bmcError(err)
	}
	if out.Capabilities.VirtualMediaCD {
		m, err := bmc.Media(ctx)
		if err != nil {
			return bmcError(err)
		}
		out.Media = &m
	}
	if o.stateFile != "" {
		st, err := boot.LoadState(o.stateFile)
		if err != nil {
			return err
		}
		out.Conditions = st.Conditions
	}
	if o.jsonOut {
		return icli.WriteJSON(o.stdout, out)
	}
	fmt.Fprintf(o.stdout, "manufacturer: %s\npower:        %s\noverride:     %s %s %s\n", out.Capabilities.Manufacturer, out.PowerState, out.Override.Target, out.Override.Enabled, out.Override.HTTPBootURI)
	arch := boot.ServerArchFromBMC(out.Capabilities.InstructionSet)
	fmt.Fprintf(o.stdout, "arch:         %s (%s)\n", cmp.Or(arch.Arch, "unknown"), arch.From)
	if out.Media != nil {
		fmt.Fprintf(o.stdout, "media:        inserted=%t %s\n", out.Media.Inserted, out.Media.Image)
	}
	writeConditions(o.stdout, &boot.State{Conditions: out.Conditions})
	return nil
}

func (o *options) eject(ctx context.Context) error {
	bmc, err := o.connect(ctx)
	if err != nil {
		return err
	}
	defer bmc.Close()
	return bmcError(bmc.EjectMedia(ctx))
}

func writeConditions(w io.Writer, st *boot.State) {
	for _, c := range st.Conditions {
		fmt.Fprintf(w, "%-22s %-7s %-22s %s\n", c.Type, c.Status, c.Reason, c.Message)
	}
}
