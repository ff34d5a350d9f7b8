package slaac

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil/netns"
)

// TestSolicitFromDnsmasq solicits the router advertisement of Debian's
// dnsmasq (enable-ra, a SLAAC range, RDNSS) over a veth pair between two
// network namespaces.
func TestSolicitFromDnsmasq(t *testing.T) {
	ifi := netns.DnsmasqClient(t, []string{"fd00:db8::1/64"},
		"--enable-ra", "--dhcp-range=fd00:db8::,ra-only,64,1h",
		"--dhcp-option=option6:dns-server,[fd00:db8::53]", "--ra-param=s0,mtu:1400,0,900")
	if ifi == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	ra, err := Solicit(ctx, ifi.Name, ifi.Index, ifi.HardwareAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("RA after %v: %+v", time.Since(start).Round(time.Millisecond), ra)
	addr, err := ra.Address(ifi.HardwareAddr)
	if err != nil {
		t.Fatal(err)
	}
	if want := "fd00:db8::ff:fe00:2/64"; addr.String() != want { // MAC 02:00:00:00:00:02
		t.Errorf("address %s, want %s", addr, want)
	}
	if !ra.Router.IsLinkLocalUnicast() || ra.RouterLifetime != 900*time.Second {
		t.Errorf("router %s lifetime %v, want link-local, 15m", ra.Router, ra.RouterLifetime)
	}
	if len(ra.RDNSS) != 1 || ra.RDNSS[0] != netip.MustParseAddr("fd00:db8::53") {
		t.Errorf("RDNSS %v", ra.RDNSS)
	}
	if ra.MTU != 1400 {
		t.Errorf("MTU %d", ra.MTU)
	}
}
