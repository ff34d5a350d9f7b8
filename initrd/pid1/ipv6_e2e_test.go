package pid1_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/internal/testutil/netns"
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

// TestUEFIHTTPBootIPv6 boots uki.efi through OVMF's native HTTP boot over
// IPv6: slirp cannot send the DHCPv6 boot file URL (option 59), so the VM's
// NIC is a tap device in a private network namespace where Debian's
// dnsmasq sends router advertisements (M flag) and DHCPv6 with the URL,
// and this test, re-executed inside the namespace, serves the UKI at
// [fd00:db8::1]. OVMF's PXE options are disabled (fw_cfg); with no DHCPv4
// server its HTTPv4 option fails and the HTTPv6 one boots.
func TestUEFIHTTPBootIPv6(t *testing.T) {
	f := setup(t)
	const port = "8080"
	if !netns.Inside() {
		ns := netns.New(t)
		ns.Run(t, "ip", "tuntap", "add", "tap0", "mode", "tap")
		ns.Run(t, "ip", "addr", "add", "fd00:db8::1/64", "dev", "tap0", "nodad")
		ns.Run(t, "ip", "link", "set", "tap0", "up")
		log := ns.Dnsmasq(t, "--interface=tap0", "--enable-ra", "--dhcp-range=fd00:db8::100,fd00:db8::1ff,64,1h",
			"--dhcp-option=option6:bootfile-url,http://[fd00:db8::1]:"+port+"/boot/uki.efi")
		defer func() {
			t.Logf("dnsmasq:\n%s", grepLines(log(), "DHCP"))
		}()
		out := netns.RunInside(t, ns, "OSB_TEST_OUTPUT="+f.out)
		if !testing.Verbose() {
			t.Log(grepLines(out, "UEFI HTTP"))
		}
		return
	}
	ln, err := net.Listen("tcp6", "[fd00:db8::1]:"+port)
	if err != nil {
		t.Fatal(err)
	}
	fetched := make(chan string, 8)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetched <- r.Method + " " + r.URL.Path + " from " + r.RemoteAddr
		w.Header().Set("Content-Type", "application/efi")
		http.ServeFile(w, r, filepath.Join(f.out, "uki.efi"))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	vm := qemu.StartT(t, ctx, qemu.Config{
		UEFI: true, MemoryMB: 3072,
		ExtraArgs: []string{
			"-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=n0,romfile=,mac=52:54:00:12:34:56",
			"-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
			"-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
		},
	})
	var firstGet string
	select {
	case firstGet = <-fetched:
	case <-ctx.Done():
		t.Fatalf("the firmware never fetched the UKI over IPv6; console:\n%s", vm.Tail(40))
	case <-vm.Done():
		t.Fatalf("QEMU exited; console:\n%s", vm.Tail(40))
	}
	fetchedAfter := time.Since(start)
	if _, err := vm.WaitFor(ctx, "osb-init: starting"); err != nil {
		t.Fatal(err)
	}
	if _, err := vm.WaitFor(ctx, testutil.MultiUser); err != nil {
		t.Fatal(err)
	}
	t.Logf("UEFI HTTP boot over IPv6: firmware fetched the UKI (%s) after %v, multi-user.target after %v",
		firstGet, fetchedAfter.Round(time.Second), time.Since(start).Round(time.Second))
}
