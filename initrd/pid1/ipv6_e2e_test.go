package pid1_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/internal/testutil/netns"
)

// TestIPv6OnlyProvisioning boots on a network without IPv4 (QEMU's slirp
// with ipv4=off: router advertisements for fec0::/64 with RDNSS, no DHCP):
// the init configures the NIC by SLAAC and fetches from an IPv6 literal
// URL, in memory mode (root image) and install mode (disk image). Memory
// mode ends once the probe counted boot 1 (multi-user.target of the same
// root layers: builder's TestBootLiveKernelInitrd); the installed disk is
// compared with the IPv4 install that booted (bootInstalled).
func TestIPv6OnlyProvisioning(t *testing.T) {
	f := setup(t)
	t.Run("memory mode", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		start := time.Now()
		vm := f.directBootIPv6(t, ctx, fmt.Sprintf("osb.root=%s/root.squashfs osb.root.sha256=%s console=ttyS0", f.url6, f.rootSHA), "", nil)
		for _, w := range []string{"by SLAAC: address fec0::", "fetch: " + f.url6, "verified", testutil.RootReady, "osb-probe: boots=1"} {
			if _, err := vm.WaitFor(ctx, w); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("IPv6: probe counted boot 1 after %v\n%s", time.Since(start).Round(time.Second), grepLines(vm.Console(), "osb-init: "))
	})
	t.Run("install", func(t *testing.T) {
		disk := blankDisk(t)
		line := f.installWith(t, disk, func(t *testing.T, ctx context.Context, disk string) *qemu.VM {
			return f.directBootIPv6(t, ctx, f.installCmdline(f.url6), disk, []string{"Kernel panic", "osb-init: FATAL"})
		})
		if !strings.Contains(line, "install: wrote") {
			t.Fatalf("install line %q", line)
		}
		f.bootInstalled(t, disk)
	})
}

// TestUEFIHTTPBootIPv6 boots uki.efi through OVMF's native HTTP boot over
// IPv6. slirp cannot send the DHCPv6 boot file URL (option 59), so the
// VM's NIC is a tap device in a private network namespace: Debian's
// dnsmasq sends the router advertisements, and this test, re-executed
// inside the namespace, answers DHCPv6 (bootServer6) and serves the UKI at
// [fd00:db8::1]. OVMF's PXE options are disabled (fw_cfg); with no DHCPv4
// server its HTTPv4 option times out and the HTTPv6 one boots.
//
// dnsmasq cannot answer here: OVMF takes only an offer whose vendor class
// (option 16) is "HTTPClient" after a 4-byte enterprise number and a
// 2-byte length, and dnsmasq writes option 16 as a length-prefixed string
// without the enterprise number (so the class lands 2 bytes early).
//
// The boot ends at the init's first line: the UKI fetched over IPv6 runs.
// That uki.efi, fetched by OVMF's HTTP boot, reaches multi-user.target is
// builder's TestBootUKIOverHTTP (IPv4): past the firmware's fetch, the
// address family makes no difference to the UKI.
func TestUEFIHTTPBootIPv6(t *testing.T) {
	f := setup(t)
	const port = "8080"
	if !netns.Inside() {
		ns := netns.New(t)
		ns.Run(t, "ip", "tuntap", "add", "tap0", "mode", "tap")
		ns.Run(t, "ip", "addr", "add", "fd00:db8::1/64", "dev", "tap0", "nodad")
		ns.Run(t, "ip", "link", "set", "tap0", "up")
		log := ns.Dnsmasq(t, "--interface=tap0", "--enable-ra", "--dhcp-range=fd00:db8::,ra-only,64,1h")
		defer func() {
			if t.Failed() {
				t.Logf("dnsmasq:\n%s", log())
			}
		}()
		out := netns.RunInside(t, ns, "OSB_TEST_OUTPUT="+f.out)
		if !testing.Verbose() {
			t.Log(grepLines(out, "UEFI HTTP"))
		}
		return
	}
	tap, err := net.InterfaceByName("tap0")
	if err != nil {
		t.Fatal(err)
	}
	bootURL := "http://[fd00:db8::1]:" + port + "/boot/uki.efi"
	dhcpLog := bootServer6(t, tap, netip.MustParseAddr("fd00:db8::100"), bootURL)
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

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	vm := qemutest.StartT(t, ctx, qemu.Config{
		UEFI: true, MemoryMB: 3072, SerialLog: os.Getenv("OSB_SERIAL_LOG"),
		ExtraArgs: []string{
			"-netdev", "tap,id=n0,ifname=tap0,script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=n0,romfile=,mac=52:54:00:12:34:56",
			"-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
			"-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
		},
	})
	var v6Start time.Duration
	if _, err := vm.WaitFor(ctx, "Start HTTP Boot over IPv6"); err != nil {
		t.Fatalf("%v\nDHCPv6: %s", err, dhcpLog())
	}
	v6Start = time.Since(start)
	var firstGet string
	select {
	case firstGet = <-fetched:
	case <-ctx.Done():
		t.Fatalf("the firmware never fetched the UKI over IPv6; DHCPv6: %s; console:\n%s", dhcpLog(), vm.Tail(40))
	case <-vm.Done():
		t.Fatalf("QEMU exited; DHCPv6: %s; console:\n%s", dhcpLog(), vm.Tail(40))
	}
	fetchedAfter := time.Since(start)
	if _, err := vm.WaitFor(ctx, "osb-init: starting"); err != nil {
		t.Fatal(err)
	}
	t.Logf("UEFI HTTP boot over IPv6: firmware started HTTPv6 after %v, fetched the UKI (%s) after %v, the init started after %v; DHCPv6: %s",
		v6Start.Round(time.Second), firstGet, fetchedAfter.Round(time.Second), time.Since(start).Round(time.Second), dhcpLog())
}

// bootServer6 answers DHCPv6 on ifi for UEFI HTTP boot: one address for
// every client, the boot file URL (option 59) and the vendor class
// "HTTPClient" (option 16) firmware looks for. It returns a log of the
// exchanges.
func bootServer6(t *testing.T, ifi *net.Interface, addr netip.Addr, bootURL string) func() string {
	t.Helper()
	conn, err := net.ListenMulticastUDP("udp6", ifi, &net.UDPAddr{IP: net.ParseIP("ff02::1:2"), Port: 547})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	opt := func(code uint16, data []byte) []byte {
		b := binary.BigEndian.AppendUint16(nil, code)
		b = binary.BigEndian.AppendUint16(b, uint16(len(data)))
		return append(b, data...)
	}
	serverID := append([]byte{0, 3, 0, 1}, ifi.HardwareAddr...)
	vendorClass := append([]byte{0, 0, 1, 0x57, 0, 10}, "HTTPClient"...) // enterprise 343
	var mu sync.Mutex
	var log []string
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			m := buf[:n]
			if len(m) < 4 || (m[0] != 1 && m[0] != 3) { // SOLICIT, REQUEST
				continue
			}
			var clientID, iaid []byte
			for o := m[4:]; len(o) >= 4; {
				code, l := binary.BigEndian.Uint16(o), int(binary.BigEndian.Uint16(o[2:]))
				if 4+l > len(o) {
					break
				}
				switch {
				case code == 1:
					clientID = o[4 : 4+l]
				case code == 3 && l >= 4:
					iaid = o[4:8]
				}
				o = o[4+l:]
			}
			if clientID == nil || iaid == nil {
				continue
			}
			reply := []byte{2, m[1], m[2], m[3]} // ADVERTISE
			if m[0] == 3 {
				reply[0] = 7 // REPLY
			}
			iaaddr := append(addr.AsSlice(), 0, 0, 0x0e, 0x10, 0, 0, 0x0e, 0x10) // 3600 s
			ia := append(append([]byte(nil), iaid...), 0, 0, 0, 0, 0, 0, 0, 0)
			ia = append(ia, opt(5, iaaddr)...)
			reply = append(reply, opt(1, clientID)...)
			reply = append(reply, opt(2, serverID)...)
			reply = append(reply, opt(3, ia)...)
			reply = append(reply, opt(16, vendorClass)...)
			reply = append(reply, opt(59, []byte(bootURL))...)
			if _, err := conn.WriteToUDP(reply, from); err != nil {
				continue
			}
			mu.Lock()
			log = append(log, fmt.Sprintf("%s->%d", map[byte]string{1: "SOLICIT", 3: "REQUEST"}[m[0]], reply[0]))
			mu.Unlock()
		}
	}()
	return func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(log, " ")
	}
}
