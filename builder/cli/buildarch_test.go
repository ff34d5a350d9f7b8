package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ironcore-dev/os-builder/builder"
	"github.com/ironcore-dev/os-builder/builder/programs"
)

// TestBuildArchitectures: a recipe with base.architectures plans (and
// builds) one output per architecture, OUTPUT/ARCH; --arch picks one,
// written to OUTPUT itself; an architecture the recipe does not name is
// a usage error (exit 2) before anything runs.
func TestBuildArchitectures(t *testing.T) {
	tree := t.TempDir()
	rpath := filepath.Join(tree, "recipe.yaml")
	recipe := `name: r
version: "1"
base: {distribution: debian, architectures: [amd64, arm64]}
arch:
  amd64: {packages: [linux-image-amd64]}
  arm64: {packages: [linux-image-arm64]}
unitsDir: .
`
	if err := os.WriteFile(rpath, []byte(recipe), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := Init
	t.Cleanup(func() { Init = saved })
	Init = programs.PrebuiltInits{FS: fstest.MapFS{
		programs.PrebuiltInitName("amd64"): {Data: []byte("\x7fELF amd64")},
		programs.PrebuiltInitName("arm64"): {Data: []byte("\x7fELF arm64")},
	}, From: "carried by the test"}
	out := filepath.Join(t.TempDir(), "out")
	cache := t.TempDir()
	plan := func(extra ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := Main(append([]string{"build", "--plan", "--json", rpath, "--output", out, "--cache-dir", cache}, extra...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, stdout, stderr := plan()
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	var plans []builder.Plan
	if err := json.Unmarshal([]byte(stdout), &plans); err != nil {
		t.Fatalf("plans: %v\n%s", err, stdout)
	}
	if len(plans) != 2 {
		t.Fatalf("%d plans, want one per architecture", len(plans))
	}
	keys := map[string]bool{}
	for i, arch := range []string{"amd64", "arm64"} {
		if want := filepath.Join(out, arch); plans[i].Output != want {
			t.Errorf("plan %d: output %s, want %s", i, plans[i].Output, want)
		}
		for _, s := range plans[i].Steps {
			if s.Step == "bootstrap" {
				keys[s.Key] = true
			}
		}
	}
	if len(keys) != 2 {
		t.Errorf("the architectures' bootstraps share a key: %v", keys)
	}

	code, stdout, stderr = plan("--arch", "arm64")
	if code != 0 {
		t.Fatalf("--arch arm64: exit %d; stderr:\n%s", code, stderr)
	}
	var one builder.Plan
	if err := json.Unmarshal([]byte(stdout), &one); err != nil {
		t.Fatalf("--arch arm64: %v\n%s", err, stdout)
	}
	if one.Output != out {
		t.Errorf("--arch arm64: output %s, want %s", one.Output, out)
	}

	code, _, stderr = plan("--arch", "riscv64")
	if code != 2 || !strings.Contains(stderr, "not built for riscv64 (architectures: amd64, arm64)") {
		t.Errorf("--arch riscv64: exit %d, stderr:\n%s", code, stderr)
	}
}
