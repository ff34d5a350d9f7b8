package pid1

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
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
	want := dhcpLease{
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

func TestBootMAC(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"console=ttyS0 BOOTIF=01-52-54-00-12-34-56", "52:54:00:12:34:56"},
		{"BOOTIF=52-54-00-12-34-56 x", "52:54:00:12:34:56"},
		{"BOOTIF=01-AA-BB-CC-DD-EE-FF", "aa:bb:cc:dd:ee:ff"},
		{"BOOTIF=garbage", ""},
		{"", ""},
	} {
		got := bootMAC(tc.in)
		if (got == nil && tc.want != "") || (got != nil && got.String() != tc.want) {
			t.Errorf("bootMAC(%q) = %v, want %q", tc.in, got, tc.want)
		}
	}
}

func TestOrderNICs(t *testing.T) {
	mac := func(b byte) net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, b} }
	nics := []nic{{name: "eth0", mac: mac(0)}, {name: "eth1", mac: mac(1), carrier: true}, {name: "eth2", mac: mac(2)}}
	names := func(ns []nic) string {
		var s []string
		for _, n := range ns {
			s = append(s, n.name)
		}
		return strings.Join(s, " ")
	}
	if got := names(orderNICs(nics, nil)); got != "eth1 eth0 eth2" {
		t.Errorf("no boot NIC: %s", got)
	}
	if got := names(orderNICs(nics, mac(2))); got != "eth2 eth1 eth0" {
		t.Errorf("boot NIC eth2: %s", got)
	}
}

func TestNetlinkMessages(t *testing.T) {
	msg := addAddrMsg(7, 2, netip.MustParsePrefix("10.0.2.15/24"))
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
	if b := broadcastOf(netip.MustParsePrefix("192.168.4.7/22")); b.String() != "192.168.7.255" {
		t.Errorf("broadcast %s", b)
	}
	r := addDefaultRouteMsg(8, 2, netip.MustParseAddr("10.0.2.2"))
	if len(r) != 16+12+8+8 || !bytes.Contains(r, []byte{10, 0, 2, 2}) {
		t.Errorf("route message % x", r)
	}
}
