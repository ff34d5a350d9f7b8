package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// InsecureFlag adds the family's --insecure flag: plain HTTP to a
// registry (loopback registries are spoken to over plain HTTP anyway).
func InsecureFlag(f *pflag.FlagSet, v *bool) {
	f.BoolVar(v, "insecure", false, "allow plain HTTP registries")
}

// Alias adds old as a hidden, deprecated spelling of the flag now, which
// f must already have: scripts that say old keep working, help shows now
// alone, and a command run with old says on stderr to use now (Family).
// Not pflag's MarkDeprecated: cobra prints its note on stdout, into
// --json output.
func Alias(f *pflag.FlagSet, old, now string) {
	flag := f.Lookup(now)
	if flag == nil {
		panic("cli.Alias: no flag --" + now)
	}
	f.Var(flag.Value, old, flag.Usage)
	alias := f.Lookup(old)
	alias.NoOptDefVal = flag.NoOptDefVal // a bool flag: --old alone is --old=true
	alias.Hidden = true
	alias.Annotations = map[string][]string{aliasOf: {now}}
}

// aliasOf annotates an Alias with the flag it spells.
const aliasOf = "os-builder/alias-of"

// noteAliases says, once per old spelling used, which spelling to use.
func noteAliases(c *cobra.Command) {
	c.Flags().Visit(func(f *pflag.Flag) {
		if now := f.Annotations[aliasOf]; len(now) == 1 {
			fmt.Fprintf(c.ErrOrStderr(), "%s: --%s is deprecated: use --%s\n", c.Root().Name(), f.Name, now[0])
		}
	})
}

// ParseReference parses a registry reference (REGISTRY/REPO:TAG or
// REGISTRY/REPO@sha256:...) as both command lines take one: what names
// where it came from (--image, REF), and a malformed reference is a usage
// error (exit 2), said before any registry request.
func ParseReference(what, ref string, insecure bool) (name.Reference, error) {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, exitcode.UsageError(fmt.Errorf("%s: %w", what, err))
	}
	return r, nil
}

// DurationFlag adds a duration flag with default def whose default and
// help print one way, the shortest: 2m, 10m, 168h, 1h30m (time.Duration
// says 2m0s, 10m0s, 168h0m0s).
func DurationFlag(f *pflag.FlagSet, v *time.Duration, flagName string, def time.Duration, usage string) {
	*v = def
	f.Var((*durationValue)(v), flagName, usage)
}

type durationValue time.Duration

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) Type() string { return "duration" }

func (d *durationValue) String() string { return FormatDuration(time.Duration(*d)) }

// FormatDuration prints d the family's way: without zero units (10m, not
// 10m0s; 168h, not 168h0m0s; 0 as 0, which help leaves unsaid as every
// zero default).
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
