package rootfs

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// TestHypervisorUnitsVerify runs `systemd-analyze verify` on every unit the
// hypervisor recipe ships, against the built image's own tree: dependencies,
// executables and keys must resolve inside the image, not on the host.
func TestHypervisorUnitsVerify(t *testing.T) {
	out := testutil.Output(t, testutil.HypervisorOutputEnv)
	buildertest.RequireTools(t, "systemd-analyze")
	r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(t), "recipes/hypervisor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Verify what this output was built with, as its manifest says.
	m, err := osimage.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.ExcludedLayers) > 0 {
		if err := r.ExcludeLayers(m.ExcludedLayers...); err != nil {
			t.Fatal(err)
		}
	}
	root := mountRootStack(t, filepath.Join(out, artifacts.FileRootfs))
	// No machine's identity may ship in an image every node boots.
	for _, pattern := range machineState {
		if m, _ := filepath.Glob(filepath.Join(root, pattern)); len(m) > 0 {
			t.Errorf("image ships machine state: %v", m)
		}
	}
	var units []string
	for _, u := range r.Units() {
		units = append(units, u.Name)
	}
	if len(units) == 0 {
		t.Fatal("the hypervisor recipe ships no units")
	}
	cmd := exec.Command("systemd-analyze", append([]string{"verify", "--root=" + root}, units...)...)
	b, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(b)) != "" {
		t.Errorf("systemd-analyze verify %s: %v\n%s", strings.Join(units, " "), err, b)
	}
}
