// Package netlink configures network interfaces through rtnetlink: link up,
// MTU, addresses and routes, IPv4 and IPv6. The init needs just these few
// requests, small enough to write by hand on golang.org/x/sys alone.
package netlink

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

var seqCounter atomic.Uint32

// attr appends a route attribute (struct rtattr + data, 4-byte aligned).
func attr(b []byte, typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// message frames body as a netlink request of type typ that asks for an
// acknowledgement.
func message(typ uint16, flags uint16, seq uint32, body []byte) []byte {
	b := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(b[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(b[8:], seq)
	return append(b, body...)
}

func family(a netip.Addr) byte {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// LinkUpMsg sets IFF_UP on ifindex (struct ifinfomsg).
func LinkUpMsg(seq uint32, ifindex int) []byte {
	body := make([]byte, unix.SizeofIfInfomsg)
	body[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(body[4:], uint32(int32(ifindex)))
	binary.NativeEndian.PutUint32(body[8:], unix.IFF_UP)  // flags
	binary.NativeEndian.PutUint32(body[12:], unix.IFF_UP) // change mask
	return message(unix.RTM_NEWLINK, 0, seq, body)
}

// SetMTUMsg sets the MTU of ifindex.
func SetMTUMsg(seq uint32, ifindex int, mtu uint32) []byte {
	body := make([]byte, unix.SizeofIfInfomsg)
	body[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(body[4:], uint32(int32(ifindex)))
	body = attr(body, unix.IFLA_MTU, binary.NativeEndian.AppendUint32(nil, mtu))
	return message(unix.RTM_NEWLINK, 0, seq, body)
}

// AddrNoDAD adds an IPv6 address usable at once, without duplicate address
// detection: the init's addresses come from a server or from the NIC's own
// MAC, and waiting a second for DAD on every boot buys nothing there.
const AddrNoDAD = unix.IFA_F_NODAD

// AddAddrMsg adds address p (with its prefix length) to ifindex (struct
// ifaddrmsg); flags are IFA_F_* flags such as AddrNoDAD.
func AddAddrMsg(seq uint32, ifindex int, p netip.Prefix, flags uint8) []byte {
	a := p.Addr().AsSlice()
	body := make([]byte, unix.SizeofIfAddrmsg)
	body[0] = family(p.Addr())
	body[1] = byte(p.Bits())
	body[2] = flags
	body[3] = unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(body[4:], uint32(int32(ifindex)))
	body = attr(body, unix.IFA_LOCAL, a)
	body = attr(body, unix.IFA_ADDRESS, a)
	if p.Addr().Is4() && p.Bits() < 31 {
		bc := BroadcastOf(p).As4()
		body = attr(body, unix.IFA_BROADCAST, bc[:])
	}
	return message(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, seq, body)
}

// BroadcastOf is the IPv4 broadcast address of p's subnet.
func BroadcastOf(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := binary.BigEndian.Uint32(a[:]) | host
	return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, v)))
}

// Route is a route out of one interface: to Dst, via Gateway, or directly
// on the link when Gateway is invalid.
type Route struct {
	Dst     netip.Prefix
	Gateway netip.Addr
}

func (r Route) String() string {
	if r.Gateway.IsValid() {
		return r.Dst.String() + " via " + r.Gateway.String()
	}
	return r.Dst.String() + " on link"
}

// AddRouteMsg adds r out of ifindex (struct rtmsg), replacing a route to
// the same destination.
func AddRouteMsg(seq uint32, ifindex int, r Route) []byte {
	body := make([]byte, unix.SizeofRtMsg)
	body[0] = family(r.Dst.Addr())
	body[1] = byte(r.Dst.Bits())
	body[4] = unix.RT_TABLE_MAIN
	body[5] = unix.RTPROT_DHCP
	body[6] = unix.RT_SCOPE_UNIVERSE
	if !r.Gateway.IsValid() {
		body[6] = unix.RT_SCOPE_LINK
	}
	body[7] = unix.RTN_UNICAST
	if r.Dst.Bits() > 0 {
		body = attr(body, unix.RTA_DST, r.Dst.Masked().Addr().AsSlice())
	}
	if r.Gateway.IsValid() {
		body = attr(body, unix.RTA_GATEWAY, r.Gateway.AsSlice())
	}
	body = attr(body, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(int32(ifindex))))
	return message(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, seq, body)
}

// LinkUp brings ifindex up.
func LinkUp(ifindex int) error {
	return Do(fmt.Sprintf("bring up interface %d", ifindex), func(seq uint32) []byte { return LinkUpMsg(seq, ifindex) })
}

// SetMTU sets ifindex's MTU.
func SetMTU(ifindex int, mtu uint32) error {
	return Do(fmt.Sprintf("set MTU %d on interface %d", mtu, ifindex), func(seq uint32) []byte { return SetMTUMsg(seq, ifindex, mtu) })
}

// AddAddr adds p to ifindex.
func AddAddr(ifindex int, p netip.Prefix, flags uint8) error {
	return Do(fmt.Sprintf("add address %s to interface %d", p, ifindex), func(seq uint32) []byte { return AddAddrMsg(seq, ifindex, p, flags) })
}

// AddRoute adds r out of ifindex.
func AddRoute(ifindex int, r Route) error {
	return Do(fmt.Sprintf("add route %s out of interface %d", r, ifindex), func(seq uint32) []byte { return AddRouteMsg(seq, ifindex, r) })
}

// Do sends one request and waits for its acknowledgement.
func Do(what string, build func(seq uint32) []byte) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("%s: netlink socket: %w", what, err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("%s: bind netlink: %w", what, err)
	}
	seq := seqCounter.Add(1)
	if err := unix.Sendto(fd, build(seq), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("%s: send: %w", what, err)
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("%s: receive: %w", what, err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return fmt.Errorf("%s: parse reply: %w", what, err)
		}
		for _, m := range msgs {
			if m.Header.Seq != seq || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return fmt.Errorf("%s: short netlink error message", what)
			}
			if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
				return fmt.Errorf("%s: %w", what, unix.Errno(-code))
			}
			return nil
		}
	}
}
