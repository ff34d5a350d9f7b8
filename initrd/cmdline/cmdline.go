// Package cmdline is the init's kernel command line contract, the osb.*
// parameters of docs/cmdline.md: their keys, and Cmdline, the typed value
// every writer renders (the builder's cmdline file and disk UKI,
// serverboot's iPXE script) and the init parses. Like initrd/layout for
// paths it stands apart from the init, so the builder and the boot driver
// name the keys without linking the init; the init links it, so it uses the
// standard library only.
package cmdline

import (
	"fmt"
	"strings"
)

// Key is an osb.* kernel parameter.
type Key string

// The keys, in docs/cmdline.md's order (Keys).
const (
	Mode            Key = "osb.mode"
	Root            Key = "osb.root"
	RootSHA256      Key = "osb.root.sha256"
	Overlay         Key = "osb.overlay"
	Persist         Key = "osb.persist"
	PersistRequired Key = "osb.persist.required"
	Data            Key = "osb.data"
	InstallImage    Key = "osb.install.image"
	InstallSHA256   Key = "osb.install.sha256"
	InstallTarget   Key = "osb.install.target"
	InstallWipe     Key = "osb.install.wipe"
	Fatal           Key = "osb.fatal"
	Debug           Key = "osb.debug"
)

// Keys are every key, in the order String writes them.
var Keys = []Key{Mode, Root, RootSHA256, Overlay, Persist, PersistRequired, Data,
	InstallImage, InstallSHA256, InstallTarget, InstallWipe, Fatal, Debug}

// Prefix starts every key: the init reads only words that start with it.
const Prefix = "osb."

// InitMode is what the init does with the OS (osb.mode).
type InitMode string

const (
	ModeMemory  InitMode = "memory"
	ModeInstall InitMode = "install"
)

// Cmdline is the osb.* parameters of a kernel command line. A zero field
// is a parameter not given (the init's default applies); the flags (0 or
// 1) are given when true. Values are as written: what they mean (a
// device, a URL, a disk selector) is the init's to check.
type Cmdline struct {
	Mode            InitMode
	Root            string
	RootSHA256      string
	Overlay         string
	Persist         []string // comma-separated on the command line
	PersistRequired bool
	Data            string
	InstallImage    string
	InstallSHA256   string
	InstallTarget   string
	InstallWipe     bool
	Fatal           string
	Debug           bool
}

// Parse reads the osb.* words of a kernel command line, split as the
// kernel splits it (Split); other words are ignored. When a key repeats
// the last one wins. An unknown osb.* key, a missing or empty value (only
// osb.debug may stand alone, meaning 1), an unknown mode or a flag other
// than 0 or 1 is an error (*Error, naming each); Parse still reads every
// other word, so the init can follow osb.fatal on a bad command line.
func Parse(s string) (Cmdline, error) {
	var c Cmdline
	var problems []string
	for _, w := range Split(s) {
		key, value, hasValue := strings.Cut(w, "=")
		if !strings.HasPrefix(key, Prefix) {
			continue
		}
		if !hasValue && Key(key) == Debug {
			c.Debug = true
			continue
		}
		if !hasValue || value == "" {
			problems = append(problems, fmt.Sprintf("%s needs a value (%s=...)", key, key))
			continue
		}
		if err := c.set(Key(key), value); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return c, &Error{Problems: problems}
	}
	return c, nil
}

// Error lists what is wrong with a command line's osb.* words.
type Error struct{ Problems []string }

func (e *Error) Error() string { return strings.Join(e.Problems, "; ") }

func (c *Cmdline) set(k Key, v string) error {
	switch k {
	case Mode:
		if m := InitMode(v); m != ModeMemory && m != ModeInstall {
			return fmt.Errorf("%s=%q: want memory or install", k, v)
		}
		c.Mode = InitMode(v)
	case Root:
		c.Root = v
	case RootSHA256:
		c.RootSHA256 = v
	case Overlay:
		c.Overlay = v
	case Persist:
		c.Persist = strings.Split(v, ",")
	case Data:
		c.Data = v
	case InstallImage:
		c.InstallImage = v
	case InstallSHA256:
		c.InstallSHA256 = v
	case InstallTarget:
		c.InstallTarget = v
	case Fatal:
		c.Fatal = v
	case PersistRequired, InstallWipe, Debug:
		if v != "0" && v != "1" {
			return fmt.Errorf("%s: %q: want 0 or 1", k, v)
		}
		*c.flag(k) = v == "1"
	default:
		return fmt.Errorf("unknown parameter %s (see docs/cmdline.md)", k)
	}
	return nil
}

func (c *Cmdline) flag(k Key) *bool {
	switch k {
	case PersistRequired:
		return &c.PersistRequired
	case InstallWipe:
		return &c.InstallWipe
	}
	return &c.Debug
}

// String is the command line of the parameters given, in Keys' order,
// space-separated; a word with white space in it is quoted, as the kernel
// reads it. Parse reads it back as c (a value cannot hold a double quote:
// the kernel has no escape for one).
func (c Cmdline) String() string {
	var words []string
	add := func(k Key, v string) {
		if v == "" {
			return
		}
		w := string(k) + "=" + v
		if strings.ContainsAny(w, " \t\n\r") {
			w = `"` + w + `"`
		}
		words = append(words, w)
	}
	flag := func(k Key, b bool) {
		if b {
			add(k, "1")
		}
	}
	add(Mode, string(c.Mode))
	add(Root, c.Root)
	add(RootSHA256, c.RootSHA256)
	add(Overlay, c.Overlay)
	if c.Persist != nil {
		add(Persist, strings.Join(c.Persist, ","))
	}
	flag(PersistRequired, c.PersistRequired)
	add(Data, c.Data)
	add(InstallImage, c.InstallImage)
	add(InstallSHA256, c.InstallSHA256)
	add(InstallTarget, c.InstallTarget)
	flag(InstallWipe, c.InstallWipe)
	add(Fatal, c.Fatal)
	flag(Debug, c.Debug)
	return strings.Join(words, " ")
}

// IsOSB says whether a command line word is an osb.* parameter.
func IsOSB(w string) bool { return strings.HasPrefix(w, Prefix) }

// KeyOf is a word's key: what comes before its first "=".
func KeyOf(w string) string {
	k, _, _ := strings.Cut(w, "=")
	return k
}

// Split splits a kernel command line into parameters the way the kernel
// does: on white space, with double quotes protecting it and removed.
// Parameters after a lone "--" belong to init's argv and are not returned.
func Split(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have, quoted := false, false, false
	for _, r := range s + " " {
		switch {
		case r == '"':
			inQuote = !inQuote
			have, quoted = true, true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			if have {
				if cur.String() == "--" && !quoted {
					return out
				}
				out = append(out, cur.String())
			}
			cur.Reset()
			have, quoted = false, false
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have { // an unterminated quote runs to the end, like the kernel's
		out = append(out, strings.TrimSuffix(cur.String(), " "))
	}
	return out
}
