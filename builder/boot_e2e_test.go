package builder

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// testOutput is the test recipe's output directory.
func testOutput(t *testing.T) string { return testutil.Output(t, testutil.TestOutputEnv) }

// TestBootLiveKernelInitrd boots the test recipe's kernel + initrd in QEMU
// with OVMF: the init must mount the root image under an overlay and hand
// over to systemd, which must reach multi-user with the layer's file, unit
// and user in place.
func TestBootLiveKernelInitrd(t *testing.T) {
	t.Parallel()
	out := testOutput(t)
	buildertest.RequireTools(t, "qemu-system-x86_64")
	cmdline, err := os.ReadFile(filepath.Join(out, "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	vm, err := qemu.Start(ctx, qemu.Config{
		Kernel:   filepath.Join(out, "vmlinuz"),
		Initrd:   filepath.Join(out, "initrd.img"),
		Append:   strings.TrimSpace(string(cmdline)),
		UEFI:     true,
		MemoryMB: 1536,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Stop()
	for _, want := range testutil.TestImageMarkers {
		if _, err := vm.WaitFor(ctx, want); err != nil {
			t.Fatalf("waiting for %q: %v\n%s", want, err, vm.Tail(60))
		}
	}
	if strings.Contains(vm.Console(), "FAILED") {
		t.Errorf("a unit failed:\n%s", vm.Tail(80))
	}
}
