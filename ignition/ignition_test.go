package ignition

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestValidateGolden validates every testdata/validate/*.ign and compares
// the verdict with its .golden file: "ok" plus warnings, or the error.
func TestValidateGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/validate/*.ign")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test configs: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".ign")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			warnings, err := Validate(raw)
			var b strings.Builder
			if err != nil {
				b.WriteString("error:\n" + err.Error() + "\n")
			} else {
				b.WriteString("ok\n")
			}
			for _, w := range warnings {
				b.WriteString("warning: " + w + "\n")
			}
			testutil.Golden(t, strings.TrimSuffix(f, ".ign")+".golden", []byte(b.String()))
			if wantOK := strings.HasPrefix(name, "ok-"); wantOK != (err == nil) {
				t.Errorf("ok = %v, want %v: %v", err == nil, wantOK, err)
			}
		})
	}
}

// TestExample: the example node renders stably and passes the validator.
func TestExample(t *testing.T) {
	out, err := Generate(Example())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, "testdata/example.ign", out)
	if _, err := Validate(out); err != nil {
		t.Fatalf("the example does not validate: %v", err)
	}
	again, _ := Generate(Example())
	if string(again) != string(out) {
		t.Error("Generate is not deterministic")
	}
}

func TestGenerateRequired(t *testing.T) {
	cases := []struct {
		name string
		node Node
		want string
	}{
		{"no hostname", Node{}, "hostname is required"},
		{"provider without classes", Node{Hostname: "h", LibvirtProvider: &LibvirtProvider{}}, "machine classes are required"},
		{"poollet without pool", Node{Hostname: "h", Machinepoollet: &Machinepoollet{Kubeconfig: "x"}}, "machine pool name are required"},
		{"metalnet without kubeconfig", Node{Hostname: "h", Metalnet: &Metalnet{}}, "kubeconfig is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Generate(tc.node)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDataLen(t *testing.T) {
	cases := []struct {
		in   string
		want int
	}{
		{"data:,abc", 3},
		{"data:,%5Bx%5D", 3},
		{"data:;base64,aGVsbG8=", 5},
		{DataURL(make([]byte, 1000)), 1000},
	}
	for _, tc := range cases {
		if got, err := dataLen(tc.in); err != nil || got != tc.want {
			t.Errorf("dataLen(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// FuzzValidate: whatever the config, Validate answers without panicking.
// Seeds over 4 KiB stay out (large-blob.ign, 100 KB past MaxInlineBytes:
// its golden test covers the limit): the fuzzer picks seeds at random, and
// each mutation of that one copies and parses 100 KB (5 s runs: 2,520
// execs with it, 11,349 without).
func FuzzValidate(f *testing.F) {
	files, _ := filepath.Glob("testdata/validate/*.ign")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil && len(b) <= 4<<10 {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		_, _ = Validate(raw) // must not panic
	})
}
