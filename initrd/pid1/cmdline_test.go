package pid1

import (
	"github.com/ironcore-dev/os-builder/initrd/cmdline"

	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/initrd/disk"
)

const digest = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseCmdline(t *testing.T) {
	defaults := Config{Mode: ModeMemory, Overlay: "tmpfs", Data: disk.DeviceRef{Kind: disk.ByPartLabel, Value: "osb-data"}}
	with := func(f func(*Config)) Config { c := defaults; f(&c); return c }
	for _, tc := range []struct {
		name    string
		in      string
		want    Config
		wantErr string
	}{
		{name: "empty", in: "", want: defaults},
		{name: "foreign params ignored", in: "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet console=ttyS0", want: defaults},
		{name: "memory initrd", in: "osb.mode=memory osb.root=initrd osb.debug=1",
			want: with(func(c *Config) { c.Root = RootSource{Kind: RootInitrd}; c.Debug = true })},
		{name: "bare debug", in: "osb.debug", want: with(func(c *Config) { c.Debug = true })},
		{name: "partlabel", in: "osb.root=partlabel:osb-root",
			want: with(func(c *Config) { c.Root = RootSource{RootPartLabel, "osb-root"} })},
		{name: "label with colon", in: "osb.root=label:A:B",
			want: with(func(c *Config) { c.Root = RootSource{RootLabel, "A:B"} })},
		{name: "url", in: "osb.root=https://h/r.img osb.root.sha256=" + strings.ToUpper(digest),
			want: with(func(c *Config) { c.Root = RootSource{RootURL, "https://h/r.img"}; c.RootSHA256 = digest })},
		{name: "url ipv6", in: "osb.root=http://[fd00:db8::5]:8080/r.img osb.root.sha256=" + digest,
			want: with(func(c *Config) {
				c.Root = RootSource{RootURL, "http://[fd00:db8::5]:8080/r.img"}
				c.RootSHA256 = digest
			})},
		{name: "url ipv6 without brackets", in: "osb.root=http://fd00:db8::5:8080/r.img osb.root.sha256=" + digest, wantErr: "IPv6 literals go in brackets"},
		{name: "install image ipv6 without brackets", in: "osb.mode=install osb.install.image=http://fd00::5/d.raw osb.install.sha256=" + digest + " osb.install.target=size:1-2",
			wantErr: `osb.install.image="http://fd00::5/d.raw": parse`},
		{name: "url without host", in: "osb.root=http://:8080/r.img osb.root.sha256=" + digest, wantErr: "no host"},
		{name: "persist", in: "osb.persist=/var/lib/a,/etc/b/,/var/lib/a osb.data=label:DATA",
			want: with(func(c *Config) {
				c.Persist = []string{"/var/lib/a", "/etc/b"}
				c.Data = disk.DeviceRef{Kind: disk.ByLabel, Value: "DATA"}
			})},
		{name: "persist required", in: "osb.persist=/var/lib/a osb.persist.required=1",
			want: with(func(c *Config) { c.Persist = []string{"/var/lib/a"}; c.PersistRequired = true })},
		{name: "persist required bad", in: "osb.persist.required=true", wantErr: "osb.persist.required"},
		{name: "last wins", in: "osb.mode=install osb.mode=memory", want: defaults},
		{name: "install", in: "osb.mode=install osb.install.image=http://h/d.raw osb.install.sha256=" + digest + " osb.install.target=size:100-2000 osb.install.wipe=1",
			want: with(func(c *Config) {
				c.Mode = ModeInstall
				c.InstallImage = "http://h/d.raw"
				c.InstallSHA256 = digest
				c.InstallTarget = disk.Target{Kind: disk.TargetSize, MinGiB: 100, MaxGiB: 2000}
				c.InstallWipe = true
			})},
		{name: "target by-id", in: "osb.install.target=by-id:nvme-X_1",
			want: with(func(c *Config) { c.InstallTarget = disk.Target{Kind: disk.TargetByID, Value: "nvme-X_1"} })},
		{name: "target path", in: "osb.install.target=path:/dev/sda",
			want: with(func(c *Config) { c.InstallTarget = disk.Target{Kind: disk.TargetPath, Value: "/dev/sda"} })},
		{name: "quoted value", in: `osb.persist="/var/lib/x y"`,
			want: with(func(c *Config) { c.Persist = []string{"/var/lib/x y"} })},
		{name: "after --", in: "quiet -- osb.bogus=1", want: defaults},

		{name: "unknown", in: "osb.frobnicate=1", wantErr: "unknown parameter osb.frobnicate"},
		{name: "bad mode", in: "osb.mode=disk", wantErr: "osb.mode"},
		{name: "no value", in: "osb.mode", wantErr: "needs a value"},
		{name: "bad root", in: "osb.root=/dev/sda", wantErr: "osb.root"},
		{name: "url without digest", in: "osb.root=http://h/r", wantErr: "osb.root.sha256 is required"},
		{name: "digest without url", in: "osb.root.sha256=" + digest, wantErr: "only used with"},
		{name: "short digest", in: "osb.install.sha256=abc", wantErr: "64 hex"},
		{name: "non-hex digest", in: "osb.root=http://h/r osb.root.sha256=" + strings.Repeat("g", 64), wantErr: "not hex"},
		{name: "overlay", in: "osb.overlay=disk", wantErr: "only tmpfs"},
		{name: "relative persist", in: "osb.persist=var/lib", wantErr: "absolute"},
		{name: "unclean persist", in: "osb.persist=/var/../etc", wantErr: "clean"},
		{name: "persist root", in: "osb.persist=/", wantErr: "cannot persist /"},
		{name: "bad data", in: "osb.data=/dev/sdb1", wantErr: "osb.data"},
		{name: "bad bool", in: "osb.install.wipe=yes", wantErr: "want 0 or 1"},
		{name: "install incomplete", in: "osb.mode=install", wantErr: "needs osb.install.image; osb.mode=install needs osb.install.sha256; osb.mode=install needs osb.install.target"},
		{name: "install image not url", in: "osb.install.image=/x", wantErr: "http"},
		{name: "target kind", in: "osb.install.target=wwn:1", wantErr: "unknown selector"},
		{name: "target size order", in: "osb.install.target=size:9-1", wantErr: "MIN <= MAX"},
		{name: "target path outside dev", in: "osb.install.target=path:/tmp/x", wantErr: "/dev/"},
		{name: "all errors reported", in: "osb.a=1 osb.b=2", wantErr: "osb.a (see docs/cmdline.md); unknown parameter osb.b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCmdline(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestResolveRoot(t *testing.T) {
	c := Config{}
	c.ResolveRoot(true)
	if c.Root.Kind != RootInitrd {
		t.Errorf("with image: %v", c.Root)
	}
	c = Config{}
	c.ResolveRoot(false)
	if c.Root != (RootSource{RootPartLabel, DefaultRootPartLabel}) {
		t.Errorf("without image: %v", c.Root)
	}
	c = Config{Root: RootSource{RootLabel, "x"}}
	c.ResolveRoot(true)
	if c.Root != (RootSource{RootLabel, "x"}) {
		t.Errorf("explicit root overridden: %v", c.Root)
	}
}

// FuzzParseCmdline checks that no input panics, that results obey the
// documented invariants, and that splitting is stable.
func FuzzParseCmdline(f *testing.F) {
	for _, s := range []string{
		"", "osb.mode=memory osb.root=initrd", `osb.persist="/a b",/c`, "osb.root=partlabel:osb-root",
		"osb.mode=install osb.install.image=http://h/x osb.install.sha256=" + digest + " osb.install.target=size:1-2",
		"a -- osb.x", `"`, "osb.debug osb.debug=0", "osb.root=http://x osb.root.sha256=" + digest,
		"osb.fatal=reboot:30", "osb.fatal=stay osb.root=x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCmdline(s)
		if c.Fatal.Delay < 0 || c.Fatal.Delay > maxFatalDelay || (!c.Fatal.Reboot && c.Fatal.Delay != 0) {
			t.Fatalf("osb.fatal %+v from %q", c.Fatal, s)
		}
		parts := cmdline.Split(s)
		for _, p := range parts {
			if p == "--" && !strings.Contains(s, `"`) {
				t.Fatalf("unquoted -- returned from %q", s)
			}
		}
		if err != nil {
			return
		}
		if c.Mode != ModeMemory && c.Mode != ModeInstall {
			t.Fatalf("mode %q", c.Mode)
		}
		if c.Root.Kind == RootURL && len(c.RootSHA256) != 64 {
			t.Fatalf("URL root without digest from %q", s)
		}
		if c.Mode == ModeInstall && (c.InstallImage == "" || c.InstallTarget.Kind == "" || len(c.InstallSHA256) != 64) {
			t.Fatalf("incomplete install accepted from %q", s)
		}
		for _, p := range c.Persist {
			if !strings.HasPrefix(p, "/") || p == "/" || strings.Contains(p, "/../") {
				t.Fatalf("persist path %q from %q", p, s)
			}
		}
		for _, p := range parts {
			k, _, _ := strings.Cut(p, "=")
			if strings.HasPrefix(k, "osb.") && !knownParams[k] {
				t.Fatalf("unknown %q accepted", k)
			}
		}
	})
}

var knownParams = map[string]bool{
	"osb.mode": true, "osb.root": true, "osb.root.sha256": true, "osb.overlay": true,
	"osb.persist": true, "osb.persist.required": true, "osb.data": true, "osb.install.image": true, "osb.install.sha256": true,
	"osb.install.target": true, "osb.install.wipe": true, "osb.debug": true, "osb.fatal": true,
}

// TestParseFatal: osb.fatal's values, and that it is honoured even when
// the rest of the command line is bad (that failure is fatal too).
func TestParseFatal(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    FatalPolicy
		wantErr string
	}{
		{"", FatalPolicy{}, ""},
		{"osb.fatal=stay", FatalPolicy{}, ""},
		{"osb.fatal=reboot:0", FatalPolicy{Reboot: true}, ""},
		{"osb.fatal=reboot:30", FatalPolicy{Reboot: true, Delay: 30 * time.Second}, ""},
		{"osb.fatal=reboot:86400", FatalPolicy{Reboot: true, Delay: 24 * time.Hour}, ""},
		{"osb.fatal=reboot:10 osb.fatal=stay", FatalPolicy{}, ""},
		{"osb.fatal=reboot:5 osb.root=bogus", FatalPolicy{Reboot: true, Delay: 5 * time.Second}, `osb.root="bogus"`},
		{"osb.mode=install osb.fatal=reboot:7", FatalPolicy{Reboot: true, Delay: 7 * time.Second}, "needs osb.install.image"},
		{"osb.fatal=reboot:86401", FatalPolicy{}, "0 to 86400"},
		{"osb.fatal=reboot:-1", FatalPolicy{}, "SECONDS"},
		{"osb.fatal=reboot:", FatalPolicy{}, "SECONDS"},
		{"osb.fatal=reboot:1m", FatalPolicy{}, "SECONDS"},
		{"osb.fatal=reboot", FatalPolicy{}, "want stay or reboot:SECONDS"},
		{"osb.fatal=panic", FatalPolicy{}, "want stay or reboot:SECONDS"},
		{"osb.fatal", FatalPolicy{}, "needs a value"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			cfg, err := ParseCmdline(tc.in)
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if cfg.Fatal != tc.want {
				t.Errorf("Fatal = %+v (%s), want %+v", cfg.Fatal, cfg.Fatal, tc.want)
			}
		})
	}
}
