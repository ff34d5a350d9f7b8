package cli

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/boot/redfish"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/redfishemu"
)

// TestValidateBeforeIO: a request that is wrong on its own (flags that
// contradict each other, an unknown policy or method, a missing --bmc or
// credentials) exits 2 before serverboot sends a single request to the
// registry or the BMC; both count what they get.
func TestValidateBeforeIO(t *testing.T) {
	ref, hits := pushCountedUKIImage(t)
	t.Setenv(redfish.EnvUsername, "admin")
	t.Setenv(redfish.EnvPassword, "password")
	emu := redfishemu.New(redfishemu.Options{})
	bmc := httptest.NewServer(emu)
	defer bmc.Close()
	listen := testutil.FreeAddr(t)
	image := []string{"--image", ref, "--insecure", "--artifact-listen", listen}
	cache := []string{"--artifact-cache-dir", filepath.Join(t.TempDir(), "cache")}
	plan := func(args ...string) []string { return append(append([]string{"plan"}, image...), args...) }
	boot := func(args ...string) []string {
		return append(append(append([]string{"boot", "--bmc", bmc.URL}, image...), cache...), args...)
	}
	tests := []struct {
		name     string
		args     []string
		contains string
	}{
		{"plan: unknown policy", plan("--policy", "Once"), `boot request: unknown policy "Once"`},
		{"plan with BMC: unknown method", plan("--bmc", bmc.URL, "--method", "floppy"), `unknown boot method "floppy"`},
		{"plan with BMC: no credentials", plan("--bmc", bmc.URL, "--credentials-file", filepath.Join(t.TempDir(), "none.json")), "none.json"},
		{"plan: install disk without target", plan("--install", "disk"), "needs a target disk selector"},
		{"plan: wipe in memory mode", plan("--install-wipe"), "install target and wipe apply to install mode disk only"},
		{"plan: root URL under policy None", plan("--root-url", "--policy", "None"), "policy None sets no boot override"},
		{"plan: install over uefi-http", plan("--install", "disk", "--install-target", "serial:x", "--method", "uefi-http"), "boots via pxe only"},
		{"plan: bad --artifact-advertise", plan("--artifact-advertise", "ftp://x"), `artifact server URL "ftp://x/`},
		{"boot without --bmc", append(append([]string{"boot"}, image...), cache...), "--bmc is required"},
		{"boot: unknown policy", boot("--policy", "Sometimes"), `unknown policy "Sometimes"`},
		{"boot: forced pxe needs an artifact URL", append(boot("--method", "pxe"), "--artifact-listen", ":8080"),
			"--artifact-advertise is required when --artifact-listen binds all addresses"},
		{"boot: unknown --arch", boot("--arch", "aarch64"), `unknown architecture "aarch64"`},
	}
	for _, tc := range tests {
		hits.Store(0)
		before := emu.Requests()
		code, out, errOut := run(t, tc.args...)
		if code != ExitUsage || !strings.Contains(errOut, tc.contains) {
			t.Errorf("%s: exit %d, want %d naming %q; stdout %q stderr %q", tc.name, code, ExitUsage, tc.contains, out, errOut)
		}
		if n := hits.Load(); n != 0 {
			t.Errorf("%s: %d registry requests before the request was refused", tc.name, n)
		}
		if n := emu.Requests() - before; n != 0 {
			t.Errorf("%s: %d BMC requests before the request was refused", tc.name, n)
		}
	}
	// The counters count: a good request reads the registry and the BMC.
	hits.Store(0)
	before := emu.Requests()
	if code, out, errOut := run(t, plan("--bmc", bmc.URL)...); code != ExitOK || hits.Load() == 0 || emu.Requests() == before {
		t.Errorf("good plan: exit %d, %d registry and %d BMC requests; stdout %q stderr %q", code, hits.Load(), emu.Requests()-before, out, errOut)
	}
}
