package dhcp6

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil/netns"
)

// TestExchangeWithDnsmasq gets an address from Debian's dnsmasq (stateful
// DHCPv6 range, DNS servers, boot file URL) over a veth pair between two
// network namespaces.
func TestExchangeWithDnsmasq(t *testing.T) {
	ifi := netns.DnsmasqClient(t, []string{"fd00:db8::1/64"},
		"--enable-ra", "--dhcp-range=fd00:db8::100,fd00:db8::1ff,64,1h",
		"--dhcp-option=option6:dns-server,[fd00:db8::53]", "--dhcp-option=option6:bootfile-url,http://[fd00:db8::1]:8080/uki.efi")
	if ifi == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	l, err := Exchange(ctx, ifi.Name, ifi.Index, ifi.HardwareAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lease after %v: %s", time.Since(start).Round(time.Millisecond), l)
	if !netip.MustParsePrefix("fd00:db8::100/120").Contains(l.Addr) {
		t.Errorf("address %s not in fd00:db8::100-1ff", l.Addr)
	}
	if len(l.DNS) != 1 || l.DNS[0] != netip.MustParseAddr("fd00:db8::53") {
		t.Errorf("DNS %v", l.DNS)
	}
	if l.BootFileURL != "http://[fd00:db8::1]:8080/uki.efi" {
		t.Errorf("boot file URL %q", l.BootFileURL)
	}
}

// TestExchangeCancelled: a cancelled context ends the exchange at once.
func TestExchangeCancelled(t *testing.T) {
	netns.CancelledExchange(t, func(ctx context.Context, ifi *net.Interface) error {
		_, err := Exchange(ctx, ifi.Name, ifi.Index, ifi.HardwareAddr)
		return err
	})
}
