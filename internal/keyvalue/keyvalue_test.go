package keyvalue

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     map[string]string
	}{
		{"empty", "", map[string]string{}},
		{"os-release", "# comment\nID=debian\n\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID='12'\n",
			map[string]string{"ID": "debian", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)", "VERSION_ID": "12"}},
		{"uevent", "MAJOR=259\nMINOR=1\nDEVNAME=nvme0n1p1\nDEVTYPE=partition\nPARTN=1\nPARTNAME=osb-data\n",
			map[string]string{"MAJOR": "259", "MINOR": "1", "DEVNAME": "nvme0n1p1", "DEVTYPE": "partition", "PARTN": "1", "PARTNAME": "osb-data"}},
		{"double-quote escapes", `A="say \"hi\" \\ \$HOME \` + "`" + `x\n"`,
			map[string]string{"A": `say "hi" \ $HOME ` + "`" + `x\n`}},
		{"single quotes are literal", `A='a \"b\"'`, map[string]string{"A": `a \"b\"`}},
		{"unbalanced quotes kept", "A=\"x\nB='y\nC=z\"", map[string]string{"A": `"x`, "B": "'y", "C": `z"`}},
		{"lone quote kept", `A="`, map[string]string{"A": `"`}},
		{"first = splits", "A=b=c\nB=\n", map[string]string{"A": "b=c", "B": ""}},
		{"surrounding space, later wins", "  A=1  \r\nA=2\n", map[string]string{"A": "2"}},
		{"lines without = skipped", "garbage\n# X=1\nY=2", map[string]string{"Y": "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("Parse(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestReadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "os-release")
	if err := os.WriteFile(p, []byte("ID=debian\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := ReadFile(p); err != nil || m["ID"] != "debian" {
		t.Errorf("ReadFile = %v, %v", m, err)
	}
	if _, err := ReadFile(p + ".missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}
