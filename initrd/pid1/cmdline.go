package pid1

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/ironcore-dev/os-builder/initrd/cmdline"
	"github.com/ironcore-dev/os-builder/initrd/disk"
	"github.com/ironcore-dev/os-builder/initrd/layout"
	"github.com/ironcore-dev/os-builder/internal/boundedfile"
)

// Mode is what the init does with the OS (docs/cmdline.md, osb.mode).
type Mode = cmdline.InitMode

const (
	ModeMemory  = cmdline.ModeMemory
	ModeInstall = cmdline.ModeInstall
)

// RootKind says where the root image comes from (osb.root).
type RootKind string

const (
	// RootDefault: osb.root was not given; see Config.ResolveRoot.
	RootDefault   RootKind = ""
	RootInitrd    RootKind = "initrd"
	RootURL       RootKind = "url"
	RootLabel     RootKind = RootKind(disk.ByLabel) // a block device, named as disk.DeviceRef names it
	RootPartLabel RootKind = RootKind(disk.ByPartLabel)
)

// RootSource is a parsed osb.root.
type RootSource struct {
	Kind RootKind
	// Value is the URL for RootURL, the name for RootLabel/RootPartLabel.
	Value string
}

func (r RootSource) String() string {
	switch r.Kind {
	case RootDefault:
		return "(default)"
	case RootInitrd:
		return "initrd"
	case RootURL:
		return r.Value
	default:
		return string(r.Kind) + ":" + r.Value
	}
}

// FatalPolicy is what the init does after a fatal error (osb.fatal).
type FatalPolicy struct {
	// Reboot after Delay; false: stay, repeating the error (the default).
	Reboot bool
	Delay  time.Duration
}

// maxFatalDelay bounds osb.fatal=reboot:SECONDS to a day.
const maxFatalDelay = 24 * time.Hour

func (p FatalPolicy) String() string {
	if !p.Reboot {
		return "stay"
	}
	return fmt.Sprintf("reboot:%d", int64(p.Delay/time.Second))
}

// Config is everything the init takes from the kernel command line. The
// zero value is not the default; ParseCmdline fills in defaults.
type Config struct {
	Mode          Mode
	Root          RootSource
	RootSHA256    string // lower-case hex, "" if not given
	Overlay       string // "tmpfs"
	Persist       []string
	Data          disk.DeviceRef
	InstallImage  string
	InstallSHA256 string
	InstallTarget disk.Target
	InstallWipe   bool
	Debug         bool
	// Fatal is set even when ParseCmdline fails on other parameters, so
	// that a bad command line follows it too.
	Fatal FatalPolicy

	// PersistRequired: no data partition for Persist is fatal instead of
	// a warning and tmpfs (osb.persist.required).
	PersistRequired bool
}

// DefaultDataPartLabel and DefaultRootPartLabel are the GPT partition names
// the disk image uses (docs/cmdline.md).
const (
	DefaultRootPartLabel = "osb-root"
	DefaultDataPartLabel = "osb-data"
)

// ResolveRoot fills in the default osb.root: the image in the initrd if there
// is one, else the osb-root partition.
func (c *Config) ResolveRoot(initrdHasImage bool) {
	if c.Root.Kind != RootDefault {
		return
	}
	if initrdHasImage {
		c.Root = RootSource{Kind: RootInitrd}
	} else {
		c.Root = RootSource{Kind: RootPartLabel, Value: DefaultRootPartLabel}
	}
}

// MergeCmdline returns the command line the init obeys, made of the
// image's own (the osb.* words of layout.CmdlinePath, which the builder
// writes into every initrd) and the loader's (/proc/cmdline): first the
// image's osb.* words whose key the loader's line does not name, then
// the loader's line unchanged. So for every key the loader's value wins,
// and a key only the image names keeps the image's value; the image's
// other words (none, as the builder writes it) are ignored. image holds
// the image's words that were kept, for the console.
func MergeCmdline(own, loader string) (merged string, image []string) {
	named := map[string]bool{}
	for _, w := range cmdline.Split(loader) {
		named[cmdline.KeyOf(w)] = true
	}
	var quoted []string
	for _, w := range cmdline.Split(own) {
		if !cmdline.IsOSB(w) || named[cmdline.KeyOf(w)] {
			continue
		}
		image = append(image, w)
		if strings.ContainsAny(w, " \t\n\r") { // as cmdline.Split read it
			w = `"` + w + `"`
		}
		quoted = append(quoted, w)
	}
	if len(quoted) == 0 {
		return loader, nil
	}
	return strings.Join(quoted, " ") + " " + loader, image
}

// readImageCmdline reads the image's own command line from the initrd:
// "" when the initrd has none (an initrd of an older builder), an error
// when it is not a regular file or longer than layout.MaxCmdline.
func readImageCmdline(path string) (string, error) {
	b, err := boundedfile.Read(path, layout.MaxCmdline)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("the image's command line: %w", err)
	}
	return string(b), nil
}

// ParseCmdline parses the osb.* parameters of a kernel command line
// (docs/cmdline.md, package initrd/cmdline) and fills in defaults. Other
// parameters are ignored; unknown osb.* parameters and bad values are
// errors, so a typo does not silently boot something else. When a
// parameter repeats, the last one wins, so a later layer's command line
// can override an earlier one.
func ParseCmdline(s string) (Config, error) {
	cfg := Config{
		Mode:    ModeMemory,
		Overlay: "tmpfs",
		Data:    disk.DeviceRef{Kind: disk.ByPartLabel, Value: DefaultDataPartLabel},
	}
	c, err := cmdline.Parse(s)
	var errs []string
	if perr, ok := err.(*cmdline.Error); ok {
		errs = perr.Problems
	}
	fail := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	cfg.Mode = cmp.Or(c.Mode, cfg.Mode)
	if c.Root != "" {
		if r, err := parseRoot(c.Root); err != nil {
			fail("%s=%q: %v", cmdline.Root, c.Root, err)
		} else {
			cfg.Root = r
		}
	}
	if c.RootSHA256 != "" {
		if d, err := parseSHA256(c.RootSHA256); err != nil {
			fail("%s: %v", cmdline.RootSHA256, err)
		} else {
			cfg.RootSHA256 = d
		}
	}
	if c.Overlay != "" && c.Overlay != "tmpfs" {
		fail("%s=%q: only tmpfs is supported", cmdline.Overlay, c.Overlay)
	}
	if c.Persist != nil {
		if ps, err := parsePersist(c.Persist); err != nil {
			fail("%s: %v", cmdline.Persist, err)
		} else {
			cfg.Persist = ps
		}
	}
	cfg.PersistRequired = c.PersistRequired
	if c.Data != "" {
		if d, err := parseDeviceRef(c.Data); err != nil {
			fail("%s=%q: %v", cmdline.Data, c.Data, err)
		} else {
			cfg.Data = d
		}
	}
	if v := c.InstallImage; v != "" {
		if !isHTTPURL(v) {
			fail("%s=%q: want an http:// or https:// URL", cmdline.InstallImage, v)
		} else if err := checkURL(v); err != nil {
			fail("%s=%q: %v", cmdline.InstallImage, v, err)
		} else {
			cfg.InstallImage = v
		}
	}
	if c.InstallSHA256 != "" {
		if d, err := parseSHA256(c.InstallSHA256); err != nil {
			fail("%s: %v", cmdline.InstallSHA256, err)
		} else {
			cfg.InstallSHA256 = d
		}
	}
	if c.InstallTarget != "" {
		if t, err := parseTarget(c.InstallTarget); err != nil {
			fail("%s=%q: %v", cmdline.InstallTarget, c.InstallTarget, err)
		} else {
			cfg.InstallTarget = t
		}
	}
	cfg.InstallWipe = c.InstallWipe
	if c.Fatal != "" {
		if p, err := parseFatal(c.Fatal); err != nil {
			fail("%s=%q: %v", cmdline.Fatal, c.Fatal, err)
		} else {
			cfg.Fatal = p
		}
	}
	cfg.Debug = c.Debug
	if len(errs) == 0 {
		errs = cfg.validate()
	}
	if len(errs) > 0 {
		return cfg, fmt.Errorf("kernel command line: %s", strings.Join(errs, "; "))
	}
	return cfg, nil
}

// validate checks rules that span parameters.
func (c *Config) validate() []string {
	var errs []string
	if c.Root.Kind == RootURL && c.RootSHA256 == "" {
		errs = append(errs, "osb.root is a URL, so osb.root.sha256 is required")
	}
	if c.RootSHA256 != "" && c.Root.Kind != RootURL {
		errs = append(errs, "osb.root.sha256 is only used with an http(s) osb.root")
	}
	if c.Mode == ModeInstall {
		if c.InstallImage == "" {
			errs = append(errs, "osb.mode=install needs osb.install.image")
		}
		if c.InstallSHA256 == "" {
			errs = append(errs, "osb.mode=install needs osb.install.sha256")
		}
		if c.InstallTarget.Kind == "" {
			errs = append(errs, "osb.mode=install needs osb.install.target")
		}
	}
	return errs
}

func isHTTPURL(s string) bool {
	for _, p := range []string{"http://", "https://"} {
		if strings.HasPrefix(s, p) && len(s) > len(p) {
			return true
		}
	}
	return false
}

// checkURL parses an http(s) URL now, so a bad one stops the boot before
// the network is set up for it.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		// Most often an IPv6 literal without brackets.
		return fmt.Errorf("%w (IPv6 literals go in brackets: http://[fd00::1]:8080/...)", err)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("no host in %q", s)
	}
	return nil
}

func parseRoot(v string) (RootSource, error) {
	switch {
	case v == "initrd":
		return RootSource{Kind: RootInitrd}, nil
	case isHTTPURL(v):
		if err := checkURL(v); err != nil {
			return RootSource{}, err
		}
		return RootSource{Kind: RootURL, Value: v}, nil
	}
	d, err := parseDeviceRef(v)
	if err != nil {
		return RootSource{}, fmt.Errorf("want initrd, an http(s) URL, label:NAME or partlabel:NAME")
	}
	return RootSource{Kind: RootKind(d.Kind), Value: d.Value}, nil
}

func parseDeviceRef(v string) (disk.DeviceRef, error) {
	kind, name, ok := strings.Cut(v, ":")
	if !ok || name == "" {
		return disk.DeviceRef{}, fmt.Errorf("want label:NAME or partlabel:NAME")
	}
	switch kind {
	case "label":
		return disk.DeviceRef{Kind: disk.ByLabel, Value: name}, nil
	case "partlabel":
		return disk.DeviceRef{Kind: disk.ByPartLabel, Value: name}, nil
	}
	return disk.DeviceRef{}, fmt.Errorf("want label:NAME or partlabel:NAME")
}

func parseSHA256(v string) (string, error) {
	v = strings.ToLower(v)
	if len(v) != 64 {
		return "", fmt.Errorf("%q is not 64 hex digits", v)
	}
	if _, err := hex.DecodeString(v); err != nil {
		return "", fmt.Errorf("%q is not hex", v)
	}
	return v, nil
}

func parseBool(v string) (bool, error) {
	switch v {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("%q: want 0 or 1", v)
}

func parsePersist(v []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, p := range v {
		if p == "" {
			continue
		}
		if !strings.HasPrefix(p, "/") {
			return nil, fmt.Errorf("%q is not an absolute path", p)
		}
		c := path.Clean(p)
		if c != p && c+"/" != p {
			return nil, fmt.Errorf("%q is not a clean path (want %q)", p, c)
		}
		if c == "/" {
			return nil, fmt.Errorf("cannot persist /")
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no paths given")
	}
	return out, nil
}

func parseTarget(v string) (disk.Target, error) {
	kind, val, ok := strings.Cut(v, ":")
	if !ok || val == "" {
		return disk.Target{}, fmt.Errorf("want by-id:ID, serial:S, path:/dev/... or size:MIN-MAX")
	}
	switch disk.TargetKind(kind) {
	case disk.TargetByID, disk.TargetSerial:
		return disk.Target{Kind: disk.TargetKind(kind), Value: val}, nil
	case disk.TargetPath:
		if !strings.HasPrefix(val, "/dev/") {
			return disk.Target{}, fmt.Errorf("path %q is not under /dev/", val)
		}
		return disk.Target{Kind: disk.TargetPath, Value: val}, nil
	case disk.TargetSize:
		lo, hi, ok := strings.Cut(val, "-")
		if !ok {
			return disk.Target{}, fmt.Errorf("size %q: want MIN-MAX in GiB", val)
		}
		min, err1 := strconv.ParseUint(lo, 10, 32)
		max, err2 := strconv.ParseUint(hi, 10, 32)
		if err1 != nil || err2 != nil || min > max {
			return disk.Target{}, fmt.Errorf("size %q: want MIN-MAX in GiB with MIN <= MAX", val)
		}
		return disk.Target{Kind: disk.TargetSize, MinGiB: min, MaxGiB: max}, nil
	}
	return disk.Target{}, fmt.Errorf("unknown selector %q: want by-id, serial, path or size", kind)
}

func parseFatal(v string) (FatalPolicy, error) {
	if v == "stay" {
		return FatalPolicy{}, nil
	}
	secs, ok := strings.CutPrefix(v, "reboot:")
	if !ok {
		return FatalPolicy{}, fmt.Errorf("want stay or reboot:SECONDS")
	}
	n, err := strconv.ParseUint(secs, 10, 32)
	if err != nil || time.Duration(n)*time.Second > maxFatalDelay {
		return FatalPolicy{}, fmt.Errorf("want reboot:SECONDS with SECONDS from 0 to %d", int64(maxFatalDelay/time.Second))
	}
	return FatalPolicy{Reboot: true, Delay: time.Duration(n) * time.Second}, nil
}
