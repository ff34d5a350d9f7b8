package recipe

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestForArchitecture: one recipe, two architectures, each with its own
// kernel package and console.
func TestForArchitecture(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "multi.yaml")
	data := `name: multi
version: "1"
base:
  distribution: debian
  architectures: [amd64, arm64]
  packages: [systemd-sysv]
kernel:
  cmdline: quiet
arch:
  amd64: {packages: [linux-image-amd64], cmdline: console=ttyS0}
  arm64: {packages: [linux-image-arm64], cmdline: console=ttyAMA0}
`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Architectures(); !slices.Equal(got, []string{"amd64", "arm64"}) {
		t.Fatalf("Architectures() = %v", got)
	}
	if r.Base.Architecture != "amd64" {
		t.Errorf("base.architecture = %q, want the first (amd64)", r.Base.Architecture)
	}
	for _, tt := range []struct{ arch, kernel, cmdline string }{
		{"amd64", "linux-image-amd64", "quiet console=ttyS0"},
		{"arm64", "linux-image-arm64", "quiet console=ttyAMA0"},
	} {
		a, err := r.ForArchitecture(tt.arch)
		if err != nil {
			t.Fatal(err)
		}
		if a.Base.Architecture != tt.arch || len(a.Base.Architectures) != 0 || !slices.Equal(a.Architectures(), []string{tt.arch}) {
			t.Errorf("%s: architecture %q, architectures %v", tt.arch, a.Base.Architecture, a.Base.Architectures)
		}
		if got, want := a.Packages(), []string{tt.kernel, "systemd-sysv"}; !slices.Equal(got, want) {
			t.Errorf("%s: Packages() = %v, want %v", tt.arch, got, want)
		}
		if got := a.Cmdline(); got != tt.cmdline {
			t.Errorf("%s: Cmdline() = %q, want %q", tt.arch, got, tt.cmdline)
		}
	}
	if _, err := r.ForArchitecture("riscv64"); err == nil {
		t.Error("ForArchitecture(riscv64) of an amd64+arm64 recipe succeeded")
	}
	if got := r.Architectures(); !slices.Equal(got, []string{"amd64", "arm64"}) {
		t.Errorf("ForArchitecture changed the recipe: %v", got)
	}
}
