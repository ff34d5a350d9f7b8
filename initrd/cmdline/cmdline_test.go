package cmdline

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in, wantErr string
		want        Cmdline
		wantString  string
	}{
		{in: "console=ttyS0 -- osb.debug", want: Cmdline{}, wantString: ""},
		{in: "osb.debug console=ttyS0", want: Cmdline{Debug: true}, wantString: "osb.debug=1"},
		{in: "osb.debug=1 osb.debug=0", want: Cmdline{}},
		{in: "osb.persist=/var/lib/a,/etc/b osb.persist.required=1 quiet", want: Cmdline{Persist: []string{"/var/lib/a", "/etc/b"}, PersistRequired: true},
			wantString: "osb.persist=/var/lib/a,/etc/b osb.persist.required=1"},
		{in: `"osb.persist=/var/lib/a b"`, want: Cmdline{Persist: []string{"/var/lib/a b"}}, wantString: `"osb.persist=/var/lib/a b"`},
		{in: "osb.install.target=serial:x osb.mode=install osb.install.wipe=1", want: Cmdline{Mode: ModeInstall, InstallTarget: "serial:x", InstallWipe: true},
			wantString: "osb.mode=install osb.install.target=serial:x osb.install.wipe=1"},
		{in: "osb.root=partlabel:osb-root console=ttyS0", want: Cmdline{Root: "partlabel:osb-root"}, wantString: "osb.root=partlabel:osb-root"},
		{in: "osb.mode=disk osb.fatal=reboot:5", want: Cmdline{Fatal: "reboot:5"}, wantErr: `osb.mode="disk": want memory or install`},
		{in: "osb.nope=1 osb.root osb.data= osb.install.wipe=yes", wantErr: `unknown parameter osb.nope (see docs/cmdline.md); osb.root needs a value (osb.root=...); ` +
			`osb.data needs a value (osb.data=...); osb.install.wipe: "yes": want 0 or 1`},
	} {
		got, err := Parse(tc.in)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("Parse(%q): %v, want error %q", tc.in, err, tc.wantErr)
			}
		} else if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Parse(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if tc.wantErr == "" && got.String() != tc.wantString {
			t.Errorf("Parse(%q).String() = %q, want %q", tc.in, got.String(), tc.wantString)
		}
	}
}

// TestSplit: the kernel's splitting, quotes and "--" included.
func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"  a  b\tc\n", []string{"a", "b", "c"}},
		{`x="a b" y`, []string{"x=a b", "y"}},
		{`"quoted all"`, []string{"quoted all"}},
		{`a="unterminated b`, []string{"a=unterminated b"}},
		{`e=""`, []string{"e="}},
		{`a "b c" d`, []string{"a", "b c", "d"}},
		{`osb.persist="/a b"`, []string{"osb.persist=/a b"}},
		{"a -- osb.debug", []string{"a"}},
		{`a "--" b`, []string{"a", "--", "b"}},
		{`a "b c`, []string{"a", "b c"}},
		{"", nil},
	} {
		if got := Split(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Split(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestDocsKeys: docs/cmdline.md's parameter table names Keys, in order.
func TestDocsKeys(t *testing.T) {
	const path = "../../docs/cmdline.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(osb\\.[a-z0-9.]+)` \\|")
	var got []Key
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		got = append(got, Key(m[1]))
	}
	if !reflect.DeepEqual(got, Keys) {
		t.Errorf("%s: parameter table names %q, the code's keys are %q", path, got, Keys)
	}
	for _, k := range Keys {
		if !strings.HasPrefix(string(k), Prefix) {
			t.Errorf("key %s lacks the prefix %s", k, Prefix)
		}
	}
}

// FuzzCmdline: what Parse reads, String writes so that Parse reads it
// back the same.
func FuzzCmdline(f *testing.F) {
	for _, s := range []string{
		"console=ttyS0 osb.mode=memory",
		"osb.mode=install osb.install.image=http://[fd00::1]:8080/d.raw osb.install.sha256=00 osb.install.target=size:10-20 osb.install.wipe=1",
		"osb.mode=memory osb.root=http://10.0.0.5/r.img osb.root.sha256=ab BOOTIF=01-aa-bb-cc-dd-ee-ff",
		`"osb.persist=/var/lib/a b,/etc" osb.persist.required=1 osb.fatal=reboot:30 osb.debug`,
		"osb.root=partlabel:osb-root osb.data=label:x osb.overlay=tmpfs -- osb.debug",
		`osb.root="a`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse(s)
		if err != nil {
			return
		}
		out := c.String()
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(%q) = %+v; its String %q does not parse: %v", s, c, out, err)
		}
		if !reflect.DeepEqual(back, c) {
			t.Fatalf("Parse(%q) = %+v; Parse(String %q) = %+v", s, c, out, back)
		}
	})
}
