package redfishemu

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Tier is a lower tier of the emulator (e.g. QEMU, redfishemu/qemutier) that
// the command can switch on: it adds its flags, then attaches itself to the
// emulator's Options (OnBoot, OnPowerOff) after parsing.
type Tier interface {
	Flags(fs *flag.FlagSet)
	// Attach returns a nil close func when the tier's flags leave it off.
	Attach(ctx context.Context, o *Options, stderr io.Writer) (close func(), err error)
}

// Main is the redfish-emulator command: it parses flags into Options and
// serves one emulated BMC until interrupted. It returns the exit code.
func Main(ctx context.Context, args []string, stderr io.Writer, tiers ...Tier) int {
	fs := flag.NewFlagSet("redfish-emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o Options
	addr := fs.String("listen", "127.0.0.1:8000", "listen address")
	certFile := fs.String("tls-cert", "", "TLS certificate (serve HTTPS)")
	keyFile := fs.String("tls-key", "", "TLS key")
	fs.StringVar(&o.Username, "username", "admin", "user name")
	fs.StringVar(&o.Manufacturer, "manufacturer", "Contoso", "manufacturer (Supermicro switches to UsbCd)")
	fs.BoolVar(&o.RequireIfMatch, "require-if-match", false, "answer 428 to PATCH without If-Match")
	fs.Float64Var(&o.FaultRate, "fault-rate", 0, "probability of an injected 503 (or 412 on PATCH)")
	fs.IntVar(&o.FaultEveryN, "fault-every", 0, "fail every Nth request with 503")
	fs.BoolVar(&o.InsertRequiresEject, "insert-requires-eject", false, "refuse InsertMedia while media is inserted")
	fs.BoolVar(&o.OnceAsContinuous, "once-as-continuous", false, "keep Once overrides after boot")
	fs.BoolVar(&o.NoContinuous, "no-continuous", false, "refuse Continuous overrides")
	fs.BoolVar(&o.NoUefiHttp, "no-uefi-http", false, "no UefiHttp boot target")
	fs.BoolVar(&o.NoVirtualMedia, "no-virtual-media", false, "no virtual media")
	fs.BoolVar(&o.AsyncReset, "async-reset", false, "answer Reset with a task monitor")
	fs.StringVar(&o.InstructionSet, "instruction-set", "x86-64", "the InstructionSet the system's CPU reports (x86-64, ARM-A64, ...): what the boot driver picks the image's build by")
	personality := fs.String("personality", "", "vendor behaviour preset: "+strings.Join(PersonalityNames(), ", ")+" (other flags add to it)")
	for _, t := range tiers {
		t.Flags(fs)
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *personality != "" {
		p, err := LookupPersonality(*personality)
		if err != nil {
			fmt.Fprintln(stderr, "redfish-emulator: --personality:", err)
			return 2
		}
		p.Apply(&o)
	}
	// The password comes from the environment so it is not in ps output.
	o.Password = os.Getenv("REDFISHEMU_PASSWORD")
	if o.Password == "" {
		o.Password = "password"
	}
	o.OnBoot = func(ev BootEvent) {
		fmt.Fprintf(stderr, "boot: target=%s httpBootUri=%s media=%s\n", ev.Target, ev.HTTPBootURI, ev.MediaImage)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	for _, t := range tiers {
		closeTier, err := t.Attach(ctx, &o, stderr)
		if err != nil {
			fmt.Fprintln(stderr, "redfish-emulator:", err)
			return 1
		}
		if closeTier != nil {
			defer closeTier()
		}
	}
	srv := &http.Server{Addr: *addr, Handler: New(o), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	fmt.Fprintf(stderr, "redfish emulator on %s (personality %q)\n", *addr, *personality)
	var err error
	if *certFile != "" {
		err = srv.ListenAndServeTLS(*certFile, *keyFile)
	} else {
		err = srv.ListenAndServe()
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(stderr, "redfish-emulator:", err)
		return 1
	}
	return 0
}
