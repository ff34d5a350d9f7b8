package rootfs

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
)

func TestInstallLinks(t *testing.T) {
	for _, tc := range []struct {
		name, unit string
		want       []string
		wantErr    string
	}{
		{name: "wants requires upholds alias",
			unit: "[Install]\nWantedBy=multi-user.target\nRequiredBy=a.target b.target\nUpheldBy=c.target\nAlias=x.service\n",
			want: []string{"multi-user.target.wants/u.service", "a.target.requires/u.service", "b.target.requires/u.service", "c.target.upholds/u.service", "x.service"}},
		{name: "other sections ignored, comments, continuation",
			unit: "[Service]\nExecStart=/bin/sh -c 'x=1'\nWantedBy=../../evil\n[Install]\n# WantedBy=../x\n; Alias=../y\nWantedBy=a.target \\\n# comment inside\n  b.target\n",
			want: []string{"a.target.wants/u.service", "b.target.wants/u.service"}},
		{name: "empty assignment resets",
			unit: "[Install]\nWantedBy=a.target\nWantedBy=\nWantedBy=b.target\n",
			want: []string{"b.target.wants/u.service"}},
		{name: "template and instance names",
			unit: "[Install]\nWantedBy=getty@tty1.service foo\\x2dbar.target\n",
			want: []string{"getty@tty1.service.wants/u.service", "foo\\x2dbar.target.wants/u.service"}},
		{name: "Also names checked", unit: "[Install]\nAlso=../x.service\n", wantErr: "u.service:2: Also=../x.service"},
		{name: "slash", unit: "\n[Install]\nWantedBy=a/b.target\n", wantErr: `u.service:3: WantedBy=a/b.target: "a/b.target" is not a plain unit name: '/' is not allowed`},
		{name: "dotdot", unit: "[Install]\nAlias=..service\n", wantErr: `contains ".."`},
		{name: "specifier", unit: "[Install]\nWantedBy=foo@%i.target\n", wantErr: `'%' is not allowed`},
		{name: "no type", unit: "[Install]\nWantedBy=.target\n", wantErr: "is not a unit name"},
		{name: "unterminated continuation", unit: "[Install]\nWantedBy=a.target \\", wantErr: "u.service:2: the file ends inside a continued line"},
		{name: "no assignment", unit: "[Install]\nWantedBy\n", wantErr: `u.service:2: "WantedBy" is not a key=value assignment`},
		{name: "bad header", unit: "[Install\n", wantErr: "u.service:1: malformed section header"},
		{name: "too large", unit: "[Install]\n#" + strings.Repeat("x", maxUnitFile), wantErr: "u.service:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := installLinks("u.service", "units/u.service", strings.NewReader(tc.unit))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// FuzzInstallLinks: whatever a unit file holds, every link it asks for
// stays a direct entry (or an entry of a direct .wants/.requires/.upholds
// directory) of /etc/systemd/system.
func FuzzInstallLinks(f *testing.F) {
	f.Add("[Install]\nWantedBy=multi-user.target\nAlias=x.service\n")
	f.Add("[Install]\nAlias=../../../../x\n")
	f.Add("[Install]\nWantedBy=a.target \\\n b.target\nRequiredBy=/etc/x.target\n")
	f.Add("[Unit]\n[Install]\nUpheldBy=a@b.target\nAlso=c.service\n")
	f.Fuzz(func(t *testing.T, unit string) {
		links, err := installLinks("u.service", "u.service", strings.NewReader(unit))
		if err != nil {
			return
		}
		for _, l := range links {
			const dir = "/etc/systemd/system/"
			p := path.Join(dir, l)
			if !strings.HasPrefix(p, dir) || p != dir+l || strings.Count(l, "/") > 1 {
				t.Fatalf("link %q lands at %s", l, p)
			}
			if d, base, ok := strings.Cut(l, "/"); ok && (base != "u.service" || !(strings.HasSuffix(d, ".wants") || strings.HasSuffix(d, ".requires") || strings.HasSuffix(d, ".upholds"))) {
				t.Fatalf("link %q is not a dependency link", l)
			}
		}
	})
}

// TestShippedUnitsInstallLinks: every unit the repository ships passes.
func TestShippedUnitsInstallLinks(t *testing.T) {
	dir := filepath.Join(buildertest.RepoRoot(t), "units")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := installLinks(e.Name(), f.Name(), f); err != nil {
			t.Error(err)
		}
		f.Close()
	}
}
