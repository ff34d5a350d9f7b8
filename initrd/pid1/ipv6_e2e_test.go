package pid1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestIPv6OnlyProvisioning boots on a network without IPv4 (QEMU's slirp
// with ipv4=off: router advertisements for fec0::/64 with RDNSS, no DHCP):
// the init configures the NIC by SLAAC and fetches from an IPv6 literal
// URL, in memory mode (root image) and install mode (disk image).
func TestIPv6OnlyProvisioning(t *testing.T) {
	f := setup(t)
	t.Run("memory mode", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		start := time.Now()
		vm := f.directBootIPv6(t, ctx, fmt.Sprintf("osb.root=%s/root.squashfs osb.root.sha256=%s console=ttyS0", f.url6, f.rootSHA), "", nil)
		for _, w := range []string{"by SLAAC: address fec0::", "fetch: " + f.url6, "verified", "osb-init: root ready", "osb-probe: boots=1", testutil.MultiUser} {
			if _, err := vm.WaitFor(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("IPv6: multi-user.target after %v\n%s", time.Since(start).Round(time.Second), grepLines(vm.Console(), "osb-init: "))
	})
	t.Run("install", func(t *testing.T) {
		disk := blankDisk(t)
		line := f.installWith(t, disk, func(t *testing.T, ctx context.Context, disk string) *qemu.VM {
			return f.directBootIPv6(t, ctx, f.installCmdline(f.url6), disk, []string{"Kernel panic", "osb-init: FATAL"})
		})
		if !strings.Contains(line, "install: wrote") {
			t.Fatalf("install line %q", line)
		}
		f.bootDisk(t, disk, "persist: creating osb-data", "osb-probe: boots=1")
	})
}
