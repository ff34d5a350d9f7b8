package cli

import (
	"context"
	"os"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestInterruptExits130: Ctrl-C exited 4 ("the BMC failed") in serverboot
// and 130 in builder; now both exit 130. The test interrupts itself run as
// serverboot, hanging on a registry that never answers.
func TestInterruptExits130(t *testing.T) {
	testutil.InterruptCLI(t, "OSB_SERVERBOOT_CHILD", exitcode.Interrupted, "serverboot: interrupted",
		func(reg string) string { return "plan --insecure --image " + reg + "/os/x:1" },
		func(args []string) int { return Run(context.Background(), args, os.Stdout, os.Stderr) })
}
