package builder

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/recipe"
)

// TestGoBuildStep builds a real program from a pinned module version
// through the module proxy and runs it; two builds give the same bytes
// (-trimpath, no build ID), which is what lets the cache key on inputs.
func TestGoBuildStep(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches a module")
	}
	g := recipe.GoBuild{
		Module:  "golang.org/x/example/hello",
		Version: "v0.0.0-20250915201037-7f05d217867b",
		Package: ".",
		Binary:  "/usr/bin/hello",
	}
	step := &goBuildStep{g: g, arch: "amd64"}
	var sums []string
	for i := 0; i < 2; i++ {
		out := t.TempDir()
		if err := step.Run(context.Background(), out); err != nil {
			t.Fatal(err)
		}
		b, err := exec.Command(step.binaryPath(out), "-r", "os-builder").CombinedOutput()
		if err != nil {
			t.Fatalf("built program fails: %v\n%s", err, b)
		}
		if !strings.Contains(string(b), "redliub-so") {
			t.Errorf("built program printed %q", b)
		}
		d, err := digestFile(step.binaryPath(out))
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, d)
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds differ: %s vs %s", sums[0], sums[1])
	}
	in1, _ := step.Inputs()
	g.Version = "v0.0.0-20250101000000-000000000000"
	in2, _ := (&goBuildStep{g: g, arch: "amd64"}).Inputs()
	if in1.Key() == in2.Key() {
		t.Error("another version gives the same cache key")
	}
}

// TestGoBuildStepUnknownVersion fails with the go command's reason.
func TestGoBuildStepUnknownVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("asks the module proxy")
	}
	step := &goBuildStep{g: recipe.GoBuild{Module: "golang.org/x/example/hello", Version: "v9.9.9", Package: ".", Binary: "/usr/bin/hello"}, arch: "amd64"}
	err := step.Run(context.Background(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "v9.9.9") {
		t.Fatalf("err = %v, want one naming the version", err)
	}
}
