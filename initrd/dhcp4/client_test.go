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
	ifi := netns.DnsmasqClient(t, []string{"192.0.2.1/24"},
		"--dhcp-range=192.0.2.100,192.0.2.150,255.255.255.0,1h",
		"--dhcp-option=3,192.0.2.254", "--dhcp-option=6,192.0.2.53", "--dhcp-option=26,1400",
		"--dhcp-option=121,198.51.100.0/24,192.0.2.7,0.0.0.0/0,192.0.2.1")
	if ifi == nil {
		return
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
	netns.CancelledExchange(t, func(ctx context.Context, ifi *net.Interface) error {
		_, err := Exchange(ctx, ifi.Name, ifi.Index, ifi.HardwareAddr)
		return err
	})
}
