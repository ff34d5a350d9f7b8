// Package dhcp4 is the init's DHCPv4 client (RFC 2131/2132): just what a
// client needs to get one lease, with the interface MTU (option 26) and
// classless static routes (option 121, RFC 3442).
package dhcp4

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/ironcore-dev/os-builder/initrd/netlink"
)

// DHCP message types (option 53).
const (
	dhcpDiscover byte = 1
	dhcpOffer    byte = 2
	dhcpRequest  byte = 3
	dhcpDecline  byte = 4
	dhcpAck      byte = 5
	dhcpNak      byte = 6
)

// DHCP option codes used here.
const (
	optPad         byte = 0
	optSubnetMask  byte = 1
	optRouter      byte = 3
	optDNS         byte = 6
	optHostName    byte = 12
	optMTU         byte = 26
	optRequestedIP byte = 50
	optLeaseTime   byte = 51
	optMessageType byte = 53
	optServerID    byte = 54
	optParamList   byte = 55
	optMaxSize     byte = 57
	optClientID    byte = 61
	optClassless   byte = 121
	optEnd         byte = 255
)

const (
	bootRequest     = 1
	bootReply       = 2
	dhcpFixedLen    = 236 // BOOTP header before the magic cookie
	dhcpMinLen      = dhcpFixedLen + 4
	dhcpFlagBcast   = 0x8000
	dhcpServerPort  = 67
	dhcpClientPort  = 68
	dhcpMaxMsgSize  = 1500 - 20 - 8 // what fits in one Ethernet frame
	dhcpMagicCookie = 0x63825363
)

// dhcpOption is one option, kept in order so encoding is deterministic.
type dhcpOption struct {
	Code byte
	Data []byte
}

// dhcpMessage is a BOOTP/DHCP message. Addresses are IPv4.
type dhcpMessage struct {
	Op      byte
	XID     uint32
	Secs    uint16
	Flags   uint16
	CIAddr  netip.Addr
	YIAddr  netip.Addr
	SIAddr  netip.Addr
	GIAddr  netip.Addr
	CHAddr  net.HardwareAddr // up to 16 bytes; Ethernet: 6
	Options []dhcpOption
}

// option returns the data of the first option with code, nil if absent.
func (m *dhcpMessage) option(code byte) []byte {
	for _, o := range m.Options {
		if o.Code == code {
			return o.Data
		}
	}
	return nil
}

// messageType is option 53, 0 if absent or malformed.
func (m *dhcpMessage) messageType() byte {
	if d := m.option(optMessageType); len(d) == 1 {
		return d[0]
	}
	return 0
}

func addr4(a netip.Addr) [4]byte {
	if a.Is4() {
		return a.As4()
	}
	return [4]byte{}
}

// encode returns the wire form of m, padded to the 300 bytes BOOTP relays
// and old servers expect.
func (m *dhcpMessage) encode() ([]byte, error) {
	if len(m.CHAddr) > 16 {
		return nil, fmt.Errorf("dhcp: hardware address of %d bytes (max 16)", len(m.CHAddr))
	}
	b := make([]byte, dhcpMinLen, 576)
	b[0] = m.Op
	b[1] = 1 // htype: Ethernet
	b[2] = byte(len(m.CHAddr))
	binary.BigEndian.PutUint32(b[4:], m.XID)
	binary.BigEndian.PutUint16(b[8:], m.Secs)
	binary.BigEndian.PutUint16(b[10:], m.Flags)
	for i, a := range []netip.Addr{m.CIAddr, m.YIAddr, m.SIAddr, m.GIAddr} {
		v := addr4(a)
		copy(b[12+4*i:], v[:])
	}
	copy(b[28:44], m.CHAddr)
	binary.BigEndian.PutUint32(b[dhcpFixedLen:], dhcpMagicCookie)
	for _, o := range m.Options {
		if o.Code == optPad || o.Code == optEnd {
			return nil, fmt.Errorf("dhcp: option %d cannot carry data", o.Code)
		}
		if len(o.Data) > 255 {
			return nil, fmt.Errorf("dhcp: option %d has %d bytes (max 255)", o.Code, len(o.Data))
		}
		b = append(b, o.Code, byte(len(o.Data)))
		b = append(b, o.Data...)
	}
	b = append(b, optEnd)
	for len(b) < 300 {
		b = append(b, optPad)
	}
	return b, nil
}

var errNotDHCP = errors.New("not a DHCP message")

// decodeDHCP parses a BOOTP/DHCP message. It never panics on bad input:
// truncated or malformed messages are errors.
func decodeDHCP(b []byte) (*dhcpMessage, error) {
	if len(b) < dhcpMinLen {
		return nil, fmt.Errorf("dhcp: %w: %d bytes", errNotDHCP, len(b))
	}
	if binary.BigEndian.Uint32(b[dhcpFixedLen:]) != dhcpMagicCookie {
		return nil, fmt.Errorf("dhcp: %w: no magic cookie", errNotDHCP)
	}
	hlen := int(b[2])
	if hlen > 16 {
		return nil, fmt.Errorf("dhcp: hardware address length %d", hlen)
	}
	m := &dhcpMessage{
		Op:     b[0],
		XID:    binary.BigEndian.Uint32(b[4:]),
		Secs:   binary.BigEndian.Uint16(b[8:]),
		Flags:  binary.BigEndian.Uint16(b[10:]),
		CIAddr: netip.AddrFrom4([4]byte(b[12:16])),
		YIAddr: netip.AddrFrom4([4]byte(b[16:20])),
		SIAddr: netip.AddrFrom4([4]byte(b[20:24])),
		GIAddr: netip.AddrFrom4([4]byte(b[24:28])),
		CHAddr: net.HardwareAddr(append([]byte(nil), b[28:28+hlen]...)),
	}
	opts := b[dhcpMinLen:]
	for i := 0; i < len(opts); {
		code := opts[i]
		if code == optEnd {
			return m, nil
		}
		if code == optPad {
			i++
			continue
		}
		if i+1 >= len(opts) {
			return nil, fmt.Errorf("dhcp: option %d truncated", code)
		}
		n := int(opts[i+1])
		if i+2+n > len(opts) {
			return nil, fmt.Errorf("dhcp: option %d: %d bytes announced, %d left", code, n, len(opts)-i-2)
		}
		m.Options = append(m.Options, dhcpOption{Code: code, Data: append([]byte(nil), opts[i+2:i+2+n]...)})
		i += 2 + n
	}
	// RFC 2131 requires the end option, but some servers omit it when the
	// options fill the packet exactly.
	return m, nil
}

// Lease is what an ACK grants.
type Lease struct {
	Addr   netip.Prefix // address with the subnet's prefix length
	Router netip.Addr   // option 3, invalid if none
	// Classless are the classless static routes (option 121); when the
	// server sends them they replace Router (RFC 3442).
	Classless []netlink.Route
	DNS       []netip.Addr
	ServerID  netip.Addr
	Lease     time.Duration
	MTU       uint16 // option 26, 0 if none
}

// Routes are the routes the lease asks for: the classless static routes
// if the server sent any (RFC 3442: a client then ignores option 3), else
// a default route via the router.
func (l Lease) Routes() []netlink.Route {
	if len(l.Classless) > 0 {
		return l.Classless
	}
	if l.Router.IsValid() {
		return []netlink.Route{{Dst: netip.PrefixFrom(netip.IPv4Unspecified(), 0), Gateway: l.Router}}
	}
	return nil
}

func (l Lease) String() string {
	s := "address " + l.Addr.String()
	for _, r := range l.Routes() {
		s += ", route " + r.String()
	}
	if l.MTU != 0 {
		s += fmt.Sprintf(", MTU %d", l.MTU)
	}
	if len(l.DNS) > 0 {
		s += fmt.Sprintf(", DNS %v", l.DNS)
	}
	if l.ServerID.IsValid() {
		s += ", server " + l.ServerID.String()
	}
	return s
}

// lease extracts the lease from an OFFER or ACK.
func (m *dhcpMessage) lease() (Lease, error) {
	if !m.YIAddr.Is4() || m.YIAddr.IsUnspecified() {
		return Lease{}, errors.New("dhcp: reply offers no address")
	}
	bits := 24 // the classful default for 10/8 is wrong more often than /24
	if mask := m.option(optSubnetMask); len(mask) == 4 {
		ones, size := net.IPMask(mask).Size()
		if size == 0 {
			return Lease{}, fmt.Errorf("dhcp: non-contiguous subnet mask %v", net.IP(mask))
		}
		bits = ones
	}
	l := Lease{Addr: netip.PrefixFrom(m.YIAddr, bits)}
	if r := m.option(optRouter); len(r) >= 4 {
		l.Router = netip.AddrFrom4([4]byte(r[:4]))
	}
	d := m.option(optDNS)
	for i := 0; i+4 <= len(d); i += 4 {
		l.DNS = append(l.DNS, netip.AddrFrom4([4]byte(d[i:i+4])))
	}
	if s := m.option(optServerID); len(s) == 4 {
		l.ServerID = netip.AddrFrom4([4]byte(s))
	}
	if t := m.option(optLeaseTime); len(t) == 4 {
		l.Lease = time.Duration(binary.BigEndian.Uint32(t)) * time.Second
	}
	if d := m.option(optMTU); d != nil {
		if len(d) != 2 {
			return Lease{}, fmt.Errorf("dhcp: option 26 (interface MTU): %d bytes, want 2", len(d))
		}
		// RFC 2132 9.1: the minimum legal value is 68.
		l.MTU = binary.BigEndian.Uint16(d)
		if l.MTU < 68 {
			return Lease{}, fmt.Errorf("dhcp: option 26 (interface MTU): %d is below the minimum of 68", l.MTU)
		}
	}
	if d := m.option(optClassless); d != nil {
		routes, err := parseClassless(d)
		if err != nil {
			return Lease{}, err
		}
		l.Classless = routes
	}
	return l, nil
}

// parseClassless decodes option 121 (RFC 3442): a list of destination
// prefix width, the significant octets of the destination, and a router;
// router 0.0.0.0 means the destination is on the link.
func parseClassless(d []byte) ([]netlink.Route, error) {
	var out []netlink.Route
	for i := 0; i < len(d); {
		width := int(d[i])
		if width > 32 {
			return nil, fmt.Errorf("dhcp: option 121 (classless static routes): prefix width %d at byte %d (max 32)", width, i)
		}
		sig := (width + 7) / 8
		if i+1+sig+4 > len(d) {
			return nil, fmt.Errorf("dhcp: option 121 (classless static routes): route at byte %d truncated (%d of %d bytes)", i, len(d)-i, 1+sig+4)
		}
		var dst [4]byte
		copy(dst[:], d[i+1:i+1+sig])
		gw := netip.AddrFrom4([4]byte(d[i+1+sig : i+1+sig+4]))
		r := netlink.Route{Dst: netip.PrefixFrom(netip.AddrFrom4(dst), width).Masked()}
		if !gw.IsUnspecified() {
			r.Gateway = gw
		}
		out = append(out, r)
		i += 1 + sig + 4
	}
	return out, nil
}

// dhcpRequestParams are the options the client asks for (option 55).
// Option 121 comes before 3, as RFC 3442 asks of clients that request both.
var dhcpRequestParams = []byte{optSubnetMask, optClassless, optRouter, optDNS, optMTU, optLeaseTime, optServerID}

// newDiscover builds a DISCOVER. The broadcast flag asks servers to
// broadcast their replies: the client has no address to receive unicast.
func newDiscover(xid uint32, mac net.HardwareAddr, secs uint16) *dhcpMessage {
	return &dhcpMessage{
		Op: bootRequest, XID: xid, Secs: secs, Flags: dhcpFlagBcast, CHAddr: mac,
		Options: []dhcpOption{
			{optMessageType, []byte{dhcpDiscover}},
			{optClientID, append([]byte{1}, mac...)},
			{optMaxSize, binary.BigEndian.AppendUint16(nil, dhcpMaxMsgSize)},
			{optParamList, dhcpRequestParams},
		},
	}
}

// newRequest builds the REQUEST for an OFFER (SELECTING state).
func newRequest(xid uint32, mac net.HardwareAddr, secs uint16, offer *dhcpMessage) *dhcpMessage {
	yi := addr4(offer.YIAddr)
	opts := []dhcpOption{
		{optMessageType, []byte{dhcpRequest}},
		{optClientID, append([]byte{1}, mac...)},
		{optRequestedIP, yi[:]},
	}
	if id := offer.option(optServerID); len(id) == 4 {
		opts = append(opts, dhcpOption{optServerID, id})
	}
	opts = append(opts,
		dhcpOption{optMaxSize, binary.BigEndian.AppendUint16(nil, dhcpMaxMsgSize)},
		dhcpOption{optParamList, dhcpRequestParams})
	return &dhcpMessage{
		Op: bootRequest, XID: xid, Secs: secs, Flags: dhcpFlagBcast, CHAddr: mac,
		Options: opts,
	}
}
