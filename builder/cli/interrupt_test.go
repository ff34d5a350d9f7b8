package cli

import (
	"os"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestInterruptExits130: builder exits 130 on Ctrl-C, as serverboot does (one
// table, internal/exitcode). The test interrupts itself run as builder,
// hanging on a registry that never answers.
func TestInterruptExits130(t *testing.T) {
	code, stderr := testutil.InterruptCLI(t, "OSB_BUILDER_CHILD",
		func(reg string) string { return "inspect --insecure " + reg + "/os/x:1" },
		func(args []string) int { return Main(args, os.Stdout, os.Stderr) })
	if code != exitcode.Interrupted {
		t.Errorf("exit %d, want %d; stderr %q", code, exitcode.Interrupted, stderr)
	}
	if !strings.Contains(stderr, "builder: interrupted") {
		t.Errorf("stderr %q", stderr)
	}
}
