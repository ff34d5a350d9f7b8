// Package exitcode is the one table of exit codes the project's command
// lines (builder, serverboot) share, and the mapping of errors onto it.
// Scripts branch on these numbers; README.md lists them (a test keeps the
// two equal).
package exitcode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// The exit codes.
const (
	OK          = 0
	Failed      = 1   // the command failed: a build step, a push, findings of a check
	Usage       = 2   // bad command, flags, arguments, recipe or state file; a destructive command without its confirming flag
	Mismatch    = 3   // what was asked cannot be done with this image or BMC: missing artifacts or capability
	Unavailable = 4   // a BMC or registry failed or could not be reached (retrying may help)
	Timeout     = 5   // a wait or --timeout ran out
	Interrupted = 130 // SIGINT or SIGTERM
)

// Code is one row of the table.
type Code struct {
	Value   int
	Name    string
	Meaning string
}

// All is the table, in order; README.md's "Exit codes" table lists exactly
// these, each as Code.String says it.
var All = []Code{
	{OK, "ok", "success"},
	{Failed, "failed", "the command failed: a build step, a push, the findings of ignition validate"},
	{Usage, "usage", "bad command, flag, argument, recipe or state file; a `--locked` build its lock does not cover; a destructive command without its confirming flag"},
	{Mismatch, "mismatch", "the image lacks the artifacts for the boot method, or the BMC the capability"},
	{Unavailable, "unavailable", "a BMC or registry failed or could not be reached (retrying may help)"},
	{Timeout, "timeout", "a wait or --timeout ran out"},
	{Interrupted, "interrupted", "SIGINT (Ctrl-C) or SIGTERM"},
}

// Coder is an error that knows its exit code; Of honours it anywhere in
// an error's chain. The constructors below make one; a package may also
// define its own.
type Coder interface {
	error
	ExitCode() int
}

// classified marks an error with its exit code; the message is the
// wrapped error's.
type classified struct {
	error
	code int
}

func (c classified) Unwrap() error { return c.error }
func (c classified) ExitCode() int { return c.code }

func mark(code int, err error) error {
	if err == nil {
		return nil
	}
	return classified{err, code}
}

// UsageError marks err as the caller's input being wrong (exit 2).
func UsageError(err error) error { return mark(Usage, err) }

// MismatchError marks err as a mismatch between request and image or BMC (exit 3).
func MismatchError(err error) error { return mark(Mismatch, err) }

// UnavailableError marks err as a remote side failing (exit 4).
func UnavailableError(err error) error { return mark(Unavailable, err) }

// TimeoutError marks err as a wait that ran out (exit 5).
func TimeoutError(err error) error { return mark(Timeout, err) }

// Of maps err onto the table. Marks anywhere in err's chain decide, the
// caller's fault first: usage, then mismatch, then timeout (a deadline
// counts), then unavailable (network and registry-server errors count),
// then interrupted; the rest failed.
func Of(err error) int {
	if err == nil {
		return OK
	}
	m := marks(err, map[int]bool{})
	switch {
	case m[Usage]:
		return Usage
	case m[Mismatch]:
		return Mismatch
	case m[Timeout], errors.Is(err, context.DeadlineExceeded):
		return Timeout
	case m[Unavailable], remote(err):
		return Unavailable
	case m[Interrupted]:
		return Interrupted
	}
	return Failed
}

// marks collects the marks in err's chain, joined errors included.
func marks(err error, m map[int]bool) map[int]bool {
	for e := err; e != nil; {
		if c, ok := e.(Coder); ok {
			m[c.ExitCode()] = true
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, b := range u.Unwrap() {
				marks(b, m)
			}
			return m
		default:
			return m
		}
	}
	return m
}

// remote reports errors of talking to another machine that retrying may
// cure: no connection, DNS, a registry answering 5xx or 429.
func remote(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode >= 500 || te.StatusCode == http.StatusTooManyRequests
	}
	var oe *net.OpError
	var de *net.DNSError
	var ue *url.Error
	return errors.As(err, &oe) || errors.As(err, &de) || errors.As(err, &ue)
}

// String is how README.md's table and --help put a code's meaning.
func (c Code) String() string { return c.Name + ": " + c.Meaning }

// Help is the table as text for a command's --help.
func Help() string {
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, c := range All {
		fmt.Fprintf(&b, "  %3d  %s\n", c.Value, c)
	}
	return b.String()
}
