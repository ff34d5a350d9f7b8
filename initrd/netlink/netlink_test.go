package netlink_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/initrd/netlink"
	"github.com/ironcore-dev/os-builder/internal/testutil/netns"
)

func TestMessages(t *testing.T) {
	msg := netlink.AddAddrMsg(7, 2, netip.MustParsePrefix("10.0.2.15/24"), 0)
	if got := binary.NativeEndian.Uint32(msg); int(got) != len(msg) {
		t.Errorf("length field %d, message %d bytes", got, len(msg))
	}
	// ifaddrmsg: family, prefix length; then IFA_LOCAL, IFA_ADDRESS,
	// IFA_BROADCAST, 8 bytes each.
	if msg[16] != 2 || msg[17] != 24 || len(msg) != 16+8+3*8 {
		t.Errorf("addr message % x", msg)
	}
	if !bytes.Contains(msg, []byte{10, 0, 2, 255}) {
		t.Error("no broadcast address 10.0.2.255")
	}
	v6 := netlink.AddAddrMsg(7, 2, netip.MustParsePrefix("fd00::5/64"), netlink.AddrNoDAD)
	// Two 20-byte attributes, no broadcast.
	if v6[16] != 10 || v6[17] != 64 || v6[18] != netlink.AddrNoDAD || len(v6) != 16+8+2*20 {
		t.Errorf("IPv6 addr message % x", v6)
	}
	for _, tc := range []struct{ in, want string }{
		{"192.168.4.7/22", "192.168.7.255"},
		{"10.0.2.15/24", "10.0.2.255"},
		{"10.1.2.3/8", "10.255.255.255"},
	} {
		if b := netlink.BroadcastOf(netip.MustParsePrefix(tc.in)); b.String() != tc.want {
			t.Errorf("BroadcastOf(%s) = %s, want %s", tc.in, b, tc.want)
		}
	}
	r := netlink.AddRouteMsg(8, 2, netlink.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("10.0.2.2")})
	if len(r) != 16+12+8+8 || !bytes.Contains(r, []byte{10, 0, 2, 2}) {
		t.Errorf("route message % x", r)
	}
	// A classless route carries its destination.
	r = netlink.AddRouteMsg(8, 2, netlink.Route{Dst: netip.MustParsePrefix("172.16.0.0/12"), Gateway: netip.MustParseAddr("10.0.2.1")})
	if len(r) != 16+12+8+8+8 || r[16+1] != 12 || !bytes.Contains(r, []byte{172, 16, 0, 0}) {
		t.Errorf("classless route message % x", r)
	}
}

// TestConfigureInNamespace applies every request to a veth interface in a
// private namespace and reads the result back with iproute2.
func TestConfigureInNamespace(t *testing.T) {
	if !netns.Inside() {
		ns := netns.New(t)
		ns.Run(t, "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
		ns.Run(t, "ip", "link", "set", "d1", "up")
		netns.RunInside(t, ns)
		return
	}
	ifi, err := net.InterfaceByName("d0")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"link up", func() error { return netlink.LinkUp(ifi.Index) }},
		{"mtu", func() error { return netlink.SetMTU(ifi.Index, 1400) }},
		{"v4 addr", func() error { return netlink.AddAddr(ifi.Index, netip.MustParsePrefix("192.0.2.10/24"), 0) }},
		{"v6 addr", func() error {
			return netlink.AddAddr(ifi.Index, netip.MustParsePrefix("2001:db8::10/64"), netlink.AddrNoDAD)
		}},
		{"v4 default", func() error {
			return netlink.AddRoute(ifi.Index, netlink.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("192.0.2.1")})
		}},
		{"v4 classless", func() error {
			return netlink.AddRoute(ifi.Index, netlink.Route{Dst: netip.MustParsePrefix("198.51.100.0/24"), Gateway: netip.MustParseAddr("192.0.2.2")})
		}},
		{"v6 default", func() error {
			return netlink.AddRoute(ifi.Index, netlink.Route{Dst: netip.MustParsePrefix("::/0"), Gateway: netip.MustParseAddr("fe80::1")})
		}},
		{"v6 on link", func() error {
			return netlink.AddRoute(ifi.Index, netlink.Route{Dst: netip.MustParsePrefix("2001:db8:1::/64")})
		}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	show := func(args ...string) string {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	for _, c := range []struct {
		out  string
		want []string
	}{
		{show("link", "show", "d0"), []string{"mtu 1400", "UP"}},
		{show("addr", "show", "d0"), []string{"inet 192.0.2.10/24 brd 192.0.2.255", "inet6 2001:db8::10/64"}},
		{show("-4", "route"), []string{"default via 192.0.2.1 dev d0", "198.51.100.0/24 via 192.0.2.2 dev d0"}},
		{show("-6", "route"), []string{"default via fe80::1 dev d0", "2001:db8:1::/64 dev d0"}},
	} {
		for _, w := range c.want {
			if !strings.Contains(c.out, w) {
				t.Errorf("want %q in:\n%s", w, c.out)
			}
		}
	}
	// The kernel's refusal comes back as an error naming the request.
	err = netlink.AddRoute(ifi.Index+1000, netlink.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gateway: netip.MustParseAddr("192.0.2.1")})
	if err == nil || !strings.Contains(err.Error(), "add route 0.0.0.0/0 via 192.0.2.1") {
		t.Errorf("route on a missing interface: %v", err)
	}
}
