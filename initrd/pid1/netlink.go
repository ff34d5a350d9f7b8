package pid1

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Three rtnetlink requests configure an interface: link up, add address,
// add default route. They are small enough to write by hand.

var netlinkSeq atomic.Uint32

// rtAttr appends a route attribute (struct rtattr + data, 4-byte aligned).
func rtAttr(b []byte, typ uint16, data []byte) []byte {
	l := unix.SizeofRtAttr + len(data)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// nlMessage frames body as a netlink request of type typ that asks for an
// acknowledgement.
func nlMessage(typ uint16, flags uint16, seq uint32, body []byte) []byte {
	b := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(b[0:], uint32(unix.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(b[4:], typ)
	binary.NativeEndian.PutUint16(b[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(b[8:], seq)
	return append(b, body...)
}

// linkUpMsg sets IFF_UP on ifindex (struct ifinfomsg).
func linkUpMsg(seq uint32, ifindex int) []byte {
	body := make([]byte, unix.SizeofIfInfomsg)
	body[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(body[4:], uint32(int32(ifindex)))
	binary.NativeEndian.PutUint32(body[8:], unix.IFF_UP)  // flags
	binary.NativeEndian.PutUint32(body[12:], unix.IFF_UP) // change mask
	return nlMessage(unix.RTM_NEWLINK, 0, seq, body)
}

// addAddrMsg adds an IPv4 address with prefix to ifindex (struct ifaddrmsg).
func addAddrMsg(seq uint32, ifindex int, p netip.Prefix) []byte {
	a := p.Addr().As4()
	body := make([]byte, unix.SizeofIfAddrmsg)
	body[0] = unix.AF_INET
	body[1] = byte(p.Bits())
	body[3] = unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(body[4:], uint32(int32(ifindex)))
	body = rtAttr(body, unix.IFA_LOCAL, a[:])
	body = rtAttr(body, unix.IFA_ADDRESS, a[:])
	if p.Bits() < 31 {
		bc := broadcastOf(p).As4()
		body = rtAttr(body, unix.IFA_BROADCAST, bc[:])
	}
	return nlMessage(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, seq, body)
}

func broadcastOf(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := binary.BigEndian.Uint32(a[:]) | host
	return netip.AddrFrom4([4]byte(binary.BigEndian.AppendUint32(nil, v)))
}

// addDefaultRouteMsg routes 0.0.0.0/0 via gw out of ifindex (struct rtmsg).
func addDefaultRouteMsg(seq uint32, ifindex int, gw netip.Addr) []byte {
	g := gw.As4()
	body := make([]byte, unix.SizeofRtMsg)
	body[0] = unix.AF_INET
	body[4] = unix.RT_TABLE_MAIN
	body[5] = unix.RTPROT_DHCP
	body[6] = unix.RT_SCOPE_UNIVERSE
	body[7] = unix.RTN_UNICAST
	body = rtAttr(body, unix.RTA_GATEWAY, g[:])
	oif := binary.NativeEndian.AppendUint32(nil, uint32(int32(ifindex)))
	body = rtAttr(body, unix.RTA_OIF, oif)
	return nlMessage(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, seq, body)
}

// netlinkDo sends one request and waits for its acknowledgement.
func netlinkDo(what string, build func(seq uint32) []byte) error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("%s: netlink socket: %w", what, err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("%s: bind netlink: %w", what, err)
	}
	seq := netlinkSeq.Add(1)
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
