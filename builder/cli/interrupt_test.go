package cli

import (
	"os"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestInterruptExits130: builder exits 130 on Ctrl-C, as serverboot does (one
// table, internal/exitcode). The test interrupts itself run as builder,
// hanging on a registry that never answers.
func TestInterruptExits130(t *testing.T) {
	testutil.InterruptCLI(t, "OSB_BUILDER_CHILD", exitcode.Interrupted, "builder: interrupted",
		func(reg string) string { return "inspect --insecure " + reg + "/os/x:1" },
		func(args []string) int { return Main(args, os.Stdout, os.Stderr) })
}
