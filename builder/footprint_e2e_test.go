package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
)

// BaselineHypervisorOutputEnv names another build of the hypervisor recipe
// (today's image, say) for TestHypervisorFootprint to set the image of
// OSB_HYPERVISOR_OUTPUT against.
const BaselineHypervisorOutputEnv = "OSB_HYPERVISOR_BASELINE_OUTPUT"

// TestHypervisorFootprint boots the hypervisor image and a baseline build
// of it side by side, each in memory (kernel and initrd, the root inside
// it) with its node config applied, and reads on the console, once
// libvirt-provider is healthy and machinepoollet waits for its API server
// (multi-user, no VM), the RAM in use: MemTotal - MemAvailable, which holds
// the root layers the initrd brought (unevictable in the initramfs) and
// the tmpfs overlay. It logs both, with the artifacts' sizes, and fails
// when the image uses more RAM than the baseline. Skipped without
// OSB_HYPERVISOR_BASELINE_OUTPUT (two slow boots: not part of make test).
func TestHypervisorFootprint(t *testing.T) {
	base := os.Getenv(BaselineHypervisorOutputEnv)
	if base == "" {
		t.Skipf("%s unset: no baseline to compare with", BaselineHypervisorOutputEnv)
	}
	out := hypervisorOutput(t)
	buildertest.RequireTools(t, "qemu-system-x86_64")
	url := serveNode(t)
	type result struct{ inUse, shmem int64 }
	res := map[string]result{}
	var mu sync.Mutex
	t.Run("boots", func(t *testing.T) {
		for name, dir := range map[string]string{"baseline": base, "image": out} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), 35*time.Minute)
				defer cancel()
				cfg := hypervisorVM(t, dir, "ignition.config.url="+url)
				cfg.Net = &qemu.NetConfig{}
				start := time.Now()
				vm := qemutest.StartT(t, ctx, cfg)
				waitAll(t, ctx, vm, "ignition-apply: applied", bootReportDone, "machinepoollet: waiting for API server at https://10.0.2.2:", "root@hv-e2e")
				t.Logf("%s: multi-user and configured after %v", name, time.Since(start).Round(time.Second))
				got := consoleChecks(t, ctx, vm, []consoleCheck{
					// libvirt-provider probes libvirt at start: minutes under TCG
					// with another boot beside it.
					{"provider", "for i in $(seq 180); do curl -fs -o /dev/null localhost:8181/healthz 2>/dev/null && break; sleep 2; done; systemctl is-active libvirt-provider"},
					{"settle", "sleep 20; echo ok"},
					{"meminfo", "awk '/^(MemTotal|MemAvailable|Shmem):/ {printf \"%s%s \", $1, $2}' /proc/meminfo"},
				})
				kb := map[string]int64{}
				for _, f := range strings.Fields(got["meminfo"]) {
					k, v, _ := strings.Cut(f, ":")
					kb[k], _ = strconv.ParseInt(v, 10, 64)
				}
				if kb["MemTotal"] == 0 || kb["MemAvailable"] == 0 {
					t.Fatalf("meminfo %q", got["meminfo"])
				}
				if got["provider"] != "active" {
					t.Errorf("%s: libvirt-provider %q (reading taken anyway: %q)", name, got["provider"], got["meminfo"])
				}
				mu.Lock()
				res[name] = result{kb["MemTotal"] - kb["MemAvailable"], kb["Shmem"]}
				mu.Unlock()
			})
		}
	})
	b, n := res["baseline"], res["image"]
	if b.inUse == 0 || n.inUse == 0 {
		t.Fatal("a boot gave no reading")
	}
	var rows []string
	row := func(what string, old, new int64) {
		rows = append(rows, fmt.Sprintf("%-32s %12d %12d %6.3f", what, old, new, float64(new)/float64(old)))
	}
	for _, f := range []string{"uki.efi", "initrd.img", "root.squashfs"} {
		row(f+" (bytes)", fileSize(t, filepath.Join(base, f)), fileSize(t, filepath.Join(out, f)))
	}
	row("MemTotal-MemAvailable (KiB)", b.inUse, n.inUse)
	row("Shmem (KiB)", b.shmem, n.shmem)
	t.Logf("%-32s %12s %12s %6s\n%s", "baseline "+base+" / image "+out, "baseline", "image", "ratio", strings.Join(rows, "\n"))
	if n.inUse > b.inUse {
		t.Errorf("the image uses %d KiB at multi-user, the baseline %d", n.inUse, b.inUse)
	}
}

func fileSize(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
