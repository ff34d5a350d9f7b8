package dhcp4

import (
	"context"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/initrd/netlink"
	"github.com/ironcore-dev/os-builder/internal/testutil/netns"
)

// TestExchangeWithDnsmasq gets a lease from Debian's dnsmasq over a veth
// pair between two network namespaces, with options 26 and 121.
func TestExchangeWithDnsmasq(t *testing.T) {
	if !netns.Inside() {
		srv, cli := netns.New(t), netns.New(t)
		netns.Veth(t, srv, "s0", cli, "c0")
		srv.Run(t, "ip", "addr", "add", "192.0.2.1/24", "dev", "s0")
		log := srv.Dnsmasq(t, "--interface=s0", "--dhcp-range=192.0.2.100,192.0.2.150,255.255.255.0,1h",
			"--dhcp-option=3,192.0.2.254", "--dhcp-option=6,192.0.2.53", "--dhcp-option=26,1400",
			"--dhcp-option=121,198.51.100.0/24,192.0.2.7,0.0.0.0/0,192.0.2.1")
		time.Sleep(300 * time.Millisecond) // dnsmasq binds
		defer func() {
			if t.Failed() {
				t.Logf("dnsmasq:\n%s", log())
			}
		}()
		netns.RunInside(t, cli)
		return
	}
	ifi, err := net.InterfaceByName("c0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Exchange(ctx, ifi.Name, ifi.Index, ifi.HardwareAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lease: %s", l)
	if a := l.Addr.Addr().As4(); a[3] < 100 || a[3] > 150 || l.Addr.Masked() != netip.MustParsePrefix("192.0.2.0/24") {
		t.Errorf("address %s", l.Addr)
	}
	if l.MTU != 1400 {
		t.Errorf("MTU %d, want 1400", l.MTU)
	}
	want := []netlink.Route{
		{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("192.0.2.7")},
		{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("192.0.2.1")},
	}
	if !reflect.DeepEqual(l.Routes(), want) {
		t.Errorf("routes %v, want %v (option 121 overrides option 3)", l.Routes(), want)
	}
	if !reflect.DeepEqual(l.DNS, []netip.Addr{netip.MustParseAddr("192.0.2.53")}) {
		t.Errorf("DNS %v", l.DNS)
	}
}

// TestExchangeCancelled: a cancelled context ends the exchange at once,
// so the IPv6 path winning does not wait for DHCPv4's retransmissions.
func TestExchangeCancelled(t *testing.T) {
	if !netns.Inside() {
		ns := netns.New(t)
		ns.Run(t, "ip", "link", "add", "c0", "type", "veth", "peer", "name", "c1")
		ns.Run(t, "ip", "link", "set", "c0", "up")
		ns.Run(t, "ip", "link", "set", "c1", "up")
		netns.RunInside(t, ns)
		return
	}
	ifi, err := net.InterfaceByName("c0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Exchange(ctx, ifi.Name, ifi.Index, ifi.HardwareAddr); err == nil {
		t.Fatal("lease without a server")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancelled exchange took %v", d)
	}
}
