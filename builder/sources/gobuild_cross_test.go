package sources

import (
	"context"
	"debug/elf"
	"os/exec"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/hostarch"
)

// TestGoBuildStepARM64: a go layer of an arm64 recipe is cross-compiled by
// the host's toolchain (GOARCH=arm64, no emulation): an AArch64 ELF, which
// runs (here under qemu-user, as the image's maintainer scripts do).
func TestGoBuildStepARM64(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches a module")
	}
	step := &GoBuild{g: hello, arch: "arm64"}
	out := t.TempDir()
	if err := step.Run(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(step.binaryPath(out))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Machine != elf.EM_AARCH64 {
		t.Fatalf("built for %v, want EM_AARCH64", f.Machine)
	}
	if err := hostarch.Check("arm64"); err != nil {
		t.Skipf("cannot run it here: %v", err)
	}
	b, err := exec.Command(step.binaryPath(out), "-r", "os-builder").CombinedOutput()
	if err != nil || !strings.Contains(string(b), "redliub-so") {
		t.Errorf("the arm64 program: %v\n%s", err, b)
	}
}
