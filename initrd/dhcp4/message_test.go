package dhcp4

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/initrd/netlink"
)

var testMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}

// slirpAck is a reply as QEMU's user-mode network sends it.
func slirpAck(t *testing.T, typ byte) []byte {
	t.Helper()
	m := &dhcpMessage{
		Op: bootReply, XID: 0xdeadbeef, CHAddr: testMAC,
		YIAddr: netip.MustParseAddr("10.0.2.15"), SIAddr: netip.MustParseAddr("10.0.2.2"),
		Options: []dhcpOption{
			{optMessageType, []byte{typ}},
			{optServerID, []byte{10, 0, 2, 2}},
			{optLeaseTime, binary.BigEndian.AppendUint32(nil, 86400)},
			{optSubnetMask, []byte{255, 255, 255, 0}},
			{optRouter, []byte{10, 0, 2, 2}},
			{optDNS, []byte{10, 0, 2, 3, 1, 1, 1, 1}},
		},
	}
	b, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDHCPRoundTrip(t *testing.T) {
	for _, m := range []*dhcpMessage{
		newDiscover(1, testMAC, 0),
		newDiscover(0xffffffff, testMAC, 7),
		newRequest(42, testMAC, 3, &dhcpMessage{YIAddr: netip.MustParseAddr("192.168.1.9"), Options: []dhcpOption{{optServerID, []byte{192, 168, 1, 1}}}}),
	} {
		b, err := m.encode()
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 300 {
			t.Errorf("encoded %d bytes, want at least 300", len(b))
		}
		got, err := decodeDHCP(b)
		if err != nil {
			t.Fatal(err)
		}
		// Decoding fills in the unspecified addresses.
		want := *m
		for _, a := range []*netip.Addr{&want.CIAddr, &want.YIAddr, &want.SIAddr, &want.GIAddr} {
			if !a.IsValid() {
				*a = netip.IPv4Unspecified()
			}
		}
		if !reflect.DeepEqual(got, &want) {
			t.Errorf("round trip:\n got %+v\nwant %+v", got, &want)
		}
	}
}

func TestDHCPWireFormat(t *testing.T) {
	b, err := newDiscover(0x01020304, testMAC, 2).encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		off  int
		want []byte
	}{
		{"op htype hlen hops", 0, []byte{1, 1, 6, 0}},
		{"xid", 4, []byte{1, 2, 3, 4}},
		{"secs flags", 8, []byte{0, 2, 0x80, 0}},
		{"chaddr", 28, testMAC},
		{"cookie", 236, []byte{99, 130, 83, 99}},
		{"message type first", 240, []byte{53, 1, 1}},
	} {
		if got := b[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("%s at %d: % x, want % x", c.name, c.off, got, c.want)
		}
	}
	req, _ := newRequest(5, testMAC, 0, &dhcpMessage{YIAddr: netip.MustParseAddr("10.0.2.15")}).encode()
	if m, _ := decodeDHCP(req); m.option(optServerID) != nil || !bytes.Equal(m.option(optRequestedIP), []byte{10, 0, 2, 15}) {
		t.Errorf("request options wrong: %+v", m.Options)
	}
}

func TestDHCPLease(t *testing.T) {
	m, err := decodeDHCP(slirpAck(t, dhcpAck))
	if err != nil {
		t.Fatal(err)
	}
	if m.messageType() != dhcpAck {
		t.Fatalf("type %d", m.messageType())
	}
	l, err := m.lease()
	if err != nil {
		t.Fatal(err)
	}
	want := Lease{
		Addr:     netip.MustParsePrefix("10.0.2.15/24"),
		Router:   netip.MustParseAddr("10.0.2.2"),
		DNS:      []netip.Addr{netip.MustParseAddr("10.0.2.3"), netip.MustParseAddr("1.1.1.1")},
		ServerID: netip.MustParseAddr("10.0.2.2"),
		Lease:    24 * time.Hour,
	}
	if !reflect.DeepEqual(l, want) {
		t.Errorf("lease %+v, want %+v", l, want)
	}
}

func TestDHCPDecodeErrors(t *testing.T) {
	good := slirpAck(t, dhcpOffer)
	noAddr := func() []byte { b := append([]byte(nil), good...); copy(b[16:20], []byte{0, 0, 0, 0}); return b }()
	badMask := func() []byte {
		m, _ := decodeDHCP(good)
		for i := range m.Options {
			if m.Options[i].Code == optSubnetMask {
				m.Options[i].Data = []byte{255, 0, 255, 0}
			}
		}
		b, _ := m.encode()
		return b
	}()
	for _, tc := range []struct {
		name    string
		in      []byte
		wantErr string // from decode, or from lease() if decode succeeds
	}{
		{"empty", nil, "not a DHCP message"},
		{"short", good[:200], "not a DHCP message"},
		{"no cookie", append(append([]byte(nil), good[:236]...), 1, 2, 3, 4), "no magic cookie"},
		{"truncated option", append(append([]byte(nil), good[:240]...), 53, 5, 1), "announced"},
		{"option code without length", append(append([]byte(nil), good[:240]...), 53), "truncated"},
		{"hlen too big", func() []byte { b := append([]byte(nil), good...); b[2] = 17; return b }(), "hardware address length"},
		{"no address", noAddr, "offers no address"},
		{"non-contiguous mask", badMask, "non-contiguous"},
	} {
		m, err := decodeDHCP(tc.in)
		if err == nil {
			_, err = m.lease()
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
		}
	}
	// No end option: accepted (some servers fill the packet exactly).
	if _, err := decodeDHCP(append(append([]byte(nil), good[:240]...), 53, 1, 2)); err != nil {
		t.Errorf("missing end option: %v", err)
	}
}

func FuzzDecodeDHCP(f *testing.F) {
	b, _ := newDiscover(1, testMAC, 0).encode()
	f.Add(b)
	f.Add([]byte{})
	f.Add(make([]byte, 240))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeDHCP(b)
		if err != nil {
			return
		}
		m.lease()
		m.messageType()
		// What decodes must encode again (CHAddr and options are bounded).
		if len(m.CHAddr) <= 16 {
			ok := true
			for _, o := range m.Options {
				if o.Code == optPad || o.Code == optEnd {
					ok = false
				}
			}
			if ok {
				if _, err := m.encode(); err != nil {
					t.Fatalf("re-encode: %v", err)
				}
			}
		}
	})
}

func TestUDP4RoundTrip(t *testing.T) {
	payload := []byte("hello dhcp")
	pkt := encodeUDP4(netip.IPv4Unspecified(), broadcastAddr, 68, 67, payload)
	if checksum(0, pkt[:ipv4HeaderLen]) != 0 {
		t.Error("IPv4 header checksum does not verify")
	}
	// The UDP checksum verifies with the pseudo header: sum is 0xffff.
	var pseudo uint32 = 0xffff + 0xffff + protoUDP + uint32(udpHeaderLen+len(payload))
	if c := checksum(pseudo, pkt[ipv4HeaderLen:]); c != 0 {
		t.Errorf("UDP checksum does not verify: %#x", c)
	}
	got, err := decodeUDP4(pkt, 67)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("decode: %q, %v", got, err)
	}
	if _, err := decodeUDP4(pkt, 68); err == nil {
		t.Error("accepted a packet for another port")
	}
	frag := append([]byte(nil), pkt...)
	frag[6] = 0x20 // more fragments
	if _, err := decodeUDP4(frag, 67); err == nil {
		t.Error("accepted a fragment")
	}
	for n := 0; n < len(pkt); n++ {
		decodeUDP4(pkt[:n], 67) // must not panic
	}
}

func FuzzDecodeUDP4(f *testing.F) {
	f.Add(encodeUDP4(netip.IPv4Unspecified(), broadcastAddr, 68, 67, []byte("x")))
	f.Fuzz(func(t *testing.T, b []byte) { decodeUDP4(b, 67) })
}

// ackWith is slirpAck with extra options appended.
func ackWith(t *testing.T, opts ...dhcpOption) *dhcpMessage {
	t.Helper()
	m, err := decodeDHCP(slirpAck(t, dhcpAck))
	if err != nil {
		t.Fatal(err)
	}
	m.Options = append(m.Options, opts...)
	return m
}

func TestLeaseMTUAndClasslessRoutes(t *testing.T) {
	route := func(dst, gw string) netlink.Route {
		r := netlink.Route{Dst: netip.MustParsePrefix(dst)}
		if gw != "" {
			r.Gateway = netip.MustParseAddr(gw)
		}
		return r
	}
	defaultVia := func(gw string) []netlink.Route { return []netlink.Route{route("0.0.0.0/0", gw)} }
	for _, tc := range []struct {
		name       string
		opts       []dhcpOption
		wantMTU    uint16
		wantRoutes []netlink.Route
		wantErr    string
	}{
		{name: "router only", wantRoutes: defaultVia("10.0.2.2")},
		{name: "mtu 9000", opts: []dhcpOption{{optMTU, []byte{0x23, 0x28}}}, wantMTU: 9000, wantRoutes: defaultVia("10.0.2.2")},
		{name: "mtu minimum", opts: []dhcpOption{{optMTU, []byte{0, 68}}}, wantMTU: 68, wantRoutes: defaultVia("10.0.2.2")},
		{name: "mtu too small", opts: []dhcpOption{{optMTU, []byte{0, 67}}}, wantErr: "below the minimum of 68"},
		{name: "mtu short", opts: []dhcpOption{{optMTU, []byte{5}}}, wantErr: "option 26 (interface MTU): 1 bytes"},
		// RFC 3442: option 121 replaces option 3, including the default route.
		{name: "classless overrides router", opts: []dhcpOption{{optClassless, []byte{
			0, 10, 0, 2, 1, // default via 10.0.2.1
			24, 192, 168, 7, 10, 0, 2, 9, // 192.168.7.0/24 via 10.0.2.9
			12, 172, 16, 0, 0, 0, 0, // 172.16.0.0/12 on link
			32, 198, 51, 100, 1, 10, 0, 2, 7, // host route
		}}}, wantRoutes: []netlink.Route{
			route("0.0.0.0/0", "10.0.2.1"), route("192.168.7.0/24", "10.0.2.9"),
			route("172.16.0.0/12", ""), route("198.51.100.1/32", "10.0.2.7"),
		}},
		{name: "classless without default", opts: []dhcpOption{{optClassless, []byte{8, 10, 10, 0, 2, 1}}},
			wantRoutes: []netlink.Route{route("10.0.0.0/8", "10.0.2.1")}},
		{name: "classless host bits masked", opts: []dhcpOption{{optClassless, []byte{9, 10, 255, 10, 0, 2, 1}}},
			wantRoutes: []netlink.Route{route("10.128.0.0/9", "10.0.2.1")}},
		{name: "classless width 33", opts: []dhcpOption{{optClassless, []byte{33, 1, 2, 3, 4, 5, 10, 0, 2, 1}}}, wantErr: "prefix width 33 at byte 0"},
		{name: "classless truncated router", opts: []dhcpOption{{optClassless, []byte{0, 10, 0, 2, 1, 24, 192, 168, 7, 10, 0}}}, wantErr: "route at byte 5 truncated"},
		{name: "classless truncated destination", opts: []dhcpOption{{optClassless, []byte{32, 10}}}, wantErr: "truncated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ackWith(t, tc.opts...).lease()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.MTU != tc.wantMTU {
				t.Errorf("MTU %d, want %d", l.MTU, tc.wantMTU)
			}
			if got := l.Routes(); !reflect.DeepEqual(got, tc.wantRoutes) {
				t.Errorf("routes %v, want %v", got, tc.wantRoutes)
			}
		})
	}
}

// TestRequestAsksForMTUAndClassless: servers send options 26 and 121 only
// when asked (option 55), 121 before 3 (RFC 3442).
func TestRequestAsksForMTUAndClassless(t *testing.T) {
	params := newDiscover(1, testMAC, 0).option(optParamList)
	i121, i3 := bytes.IndexByte(params, optClassless), bytes.IndexByte(params, optRouter)
	if i121 < 0 || i3 < 0 || i121 > i3 || bytes.IndexByte(params, optMTU) < 0 {
		t.Errorf("parameter request list %v", params)
	}
}

func FuzzParseClassless(f *testing.F) {
	f.Add([]byte{0, 10, 0, 2, 1, 24, 192, 168, 7, 10, 0, 2, 9})
	f.Add([]byte{33})
	f.Add([]byte{32, 1, 2, 3, 4, 5, 6, 7})
	f.Fuzz(func(t *testing.T, b []byte) {
		routes, err := parseClassless(b)
		if err != nil {
			return
		}
		for _, r := range routes {
			if !r.Dst.IsValid() || r.Dst != r.Dst.Masked() || r.Dst.Bits() > 32 {
				t.Fatalf("bad route %v from % x", r, b)
			}
		}
	})
}
