package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// TestFormatDuration: durations print one way, without zero units (the
// help said 2m for one flag and 10m0s for the next).
func TestFormatDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0"},
		{500 * time.Millisecond, "500ms"},
		{20 * time.Second, "20s"},
		{90 * time.Second, "1m30s"},
		{2 * time.Minute, "2m"},
		{10 * time.Minute, "10m"},
		{90 * time.Minute, "1h30m"},
		{168 * time.Hour, "168h"},
		{time.Hour + time.Second, "1h0m1s"},
	} {
		if got := FormatDuration(tc.d); got != tc.want {
			t.Errorf("FormatDuration(%s) = %q, want %q", tc.d, got, tc.want)
		}
		if d, err := time.ParseDuration(tc.want); err != nil || d != tc.d {
			t.Errorf("%q parses back as %s, %v", tc.want, d, err)
		}
	}
}

// TestDurationFlagHelp: a duration flag's default reads as FormatDuration
// prints it, and setting it parses as time.ParseDuration does.
func TestDurationFlagHelp(t *testing.T) {
	f := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var d, zero time.Duration
	DurationFlag(f, &d, "wait", 10*time.Minute, "how long")
	DurationFlag(f, &zero, "older-than", 0, "only older")
	if got := f.FlagUsages(); !strings.Contains(got, "how long (default 10m)\n") || strings.Contains(got, "only older (default") {
		t.Errorf("help:\n%s", got)
	}
	if d != 10*time.Minute {
		t.Errorf("default %s", d)
	}
	if err := f.Parse([]string{"--wait", "90s", "--older-than", "168h"}); err != nil {
		t.Fatal(err)
	}
	if d != 90*time.Second || zero != 168*time.Hour || f.Lookup("wait").Value.String() != "1m30s" {
		t.Errorf("parsed %s, %s, %s", d, zero, f.Lookup("wait").Value)
	}
	if err := f.Parse([]string{"--wait", "soon"}); err == nil {
		t.Error("--wait soon: no error")
	}
}

// TestAlias: the old spelling still sets the flag, is hidden from help
// and, when used, says on stderr (not stdout, where --json goes) to use
// the new one.
func TestAlias(t *testing.T) {
	var insecure bool
	var dir string
	c := &cobra.Command{Use: "tool", RunE: func(*cobra.Command, []string) error { return nil }}
	f := c.Flags()
	InsecureFlag(f, &insecure)
	Alias(f, "insecure-registry", "insecure")
	f.StringVar(&dir, "artifact-cache-dir", "", "blob cache")
	Alias(f, "cache-dir", "artifact-cache-dir")
	for _, tc := range []struct {
		args []string
		note string
	}{
		{[]string{"--insecure", "--artifact-cache-dir", "/c"}, ""},
		{[]string{"--insecure-registry", "--cache-dir", "/c"},
			"tool: --cache-dir is deprecated: use --artifact-cache-dir\ntool: --insecure-registry is deprecated: use --insecure\n"},
	} {
		insecure, dir = false, ""
		var stdout, stderr bytes.Buffer
		c.SetOut(&stdout)
		c.SetErr(&stderr)
		if code := Execute(context.Background(), c, tc.args, &stderr, ""); code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, stderr.String())
		}
		c.Flags().VisitAll(func(f *pflag.Flag) { f.Changed = false })
		if !insecure || dir != "/c" {
			t.Errorf("%v: insecure %t, dir %q", tc.args, insecure, dir)
		}
		if stderr.String() != tc.note || stdout.Len() > 0 {
			t.Errorf("%v: stderr %q, want %q; stdout %q", tc.args, stderr.String(), tc.note, stdout.String())
		}
	}
	if help := f.FlagUsages(); strings.Contains(help, "insecure-registry") || strings.Contains(help, "--cache-dir") {
		t.Errorf("help shows the old spellings:\n%s", help)
	}
}

// TestParseReference: a malformed reference is a usage error naming where
// it came from.
func TestParseReference(t *testing.T) {
	if _, err := ParseReference("--image", "Bad Ref", false); exitcode.Of(err) != exitcode.Usage || !strings.Contains(err.Error(), "--image") {
		t.Errorf("Bad Ref: %v (exit %d), want a usage error naming --image", err, exitcode.Of(err))
	}
	r, err := ParseReference("REF", "127.0.0.1:5000/os/x:1", true)
	if err != nil || r.Context().Registry.Scheme() != "http" {
		t.Errorf("insecure: %v, %v", r, err)
	}
	r, err = ParseReference("REF", "registry.example/os/x:1", false)
	if err != nil || r.Context().Registry.Scheme() != "https" {
		t.Errorf("secure: %v, %v", r, err)
	}
}
