package cli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/boot/redfish"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestOldSpellings: --insecure-registry (now the family's --insecure) and
// boot's --cache-dir (now --artifact-cache-dir, builder's --cache-dir is
// another cache) still work, hidden from help, with a note to use the new
// spelling.
func TestOldSpellings(t *testing.T) {
	ref := pushUKIImage(t)
	listen := testutil.FreeAddr(t)
	for _, insecure := range []string{"--insecure", "--insecure-registry"} {
		code, out, errOut := run(t, "plan", "--image", ref, insecure, "--artifact-listen", listen)
		if code != ExitOK || !strings.Contains(out, "uefi-http") {
			t.Errorf("plan %s: exit %d, stdout %q stderr %q", insecure, code, out, errOut)
		}
		if deprecated := insecure == "--insecure-registry"; deprecated != strings.Contains(errOut, "use --insecure") {
			t.Errorf("plan %s: stderr %q", insecure, errOut)
		}
	}
	_, help, _ := run(t, "boot", "--help")
	for _, old := range []string{"--insecure-registry", "--cache-dir"} {
		if strings.Contains(help, old+" ") {
			t.Errorf("boot --help shows %s:\n%s", old, help)
		}
	}
	// Both spellings reach the same option (internal/cli TestAlias): boot
	// takes either and goes on to the BMC, which is down here.
	t.Setenv(redfish.EnvUsername, "admin")
	t.Setenv(redfish.EnvPassword, "password")
	for _, flag := range []string{"--cache-dir", "--artifact-cache-dir"} {
		code, _, errOut := run(t, "boot", "--bmc", "http://"+testutil.FreeAddr(t), "--image", ref, "--insecure", "--artifact-listen", listen,
			flag, filepath.Join(t.TempDir(), "cache"), "--timeout", "5s")
		if code != ExitBMC || strings.Contains(errOut, "unknown flag") {
			t.Errorf("boot %s: exit %d, stderr %q; want %d (BMC down)", flag, code, errOut, ExitBMC)
		}
	}
}

// TestDurationsPrintOneWay: help says 2m, 10m, 30m, never 10m0s.
func TestDurationsPrintOneWay(t *testing.T) {
	_, help, _ := run(t, "boot", "--help")
	for _, want := range []string{"(default 10m)", "fetched late) (default 10m)", "included (default 30m)"} {
		if !strings.Contains(help, want) {
			t.Errorf("boot --help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "m0s") {
		t.Errorf("boot --help prints a duration with zero units:\n%s", help)
	}
	if _, help, _ = run(t, "plan", "--help"); !strings.Contains(help, "included (default 2m)") {
		t.Errorf("plan --help:\n%s", help)
	}
	if code, _, errOut := run(t, "status", "--bmc", "http://127.0.0.1:1", "--timeout", "-1s"); code != ExitUsage || !strings.Contains(errOut, "--timeout -1s") {
		t.Errorf("--timeout -1s: exit %d, %q", code, errOut)
	}
}

// TestBadImageReference: a malformed --image is a usage error, said by the
// family's one reference parser (builder's REF too).
func TestBadImageReference(t *testing.T) {
	code, _, errOut := run(t, "plan", "--image", "Bad Ref")
	if code != ExitUsage || !strings.Contains(errOut, "--image: ") {
		t.Errorf("exit %d, stderr %q; want %d naming --image", code, errOut, ExitUsage)
	}
}
