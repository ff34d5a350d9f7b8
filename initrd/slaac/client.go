package slaac

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// SolicitInterval is the wait between router solicitations (RFC 4861
// RTR_SOLICITATION_INTERVAL); Solicit keeps sending until ctx ends.
var SolicitInterval = 4 * time.Second

const pollInterval = 200 * time.Millisecond

// Solicit sends router solicitations on the interface (name, index, mac)
// and returns the first advertisement that offers a default router or an
// address (autonomous prefix or DHCPv6). Advertisements not sent with hop
// limit 255 came from off the link and are ignored (RFC 4861 6.1.2).
func Solicit(ctx context.Context, name string, index int, mac net.HardwareAddr) (RA, error) {
	fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMPV6)
	if err != nil {
		return RA{}, fmt.Errorf("ICMPv6 socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.BindToDevice(fd, name); err != nil {
		return RA{}, fmt.Errorf("bind ICMPv6 socket to %s: %w", name, err)
	}
	// Only router advertisements reach the socket.
	var filter unix.ICMPv6Filter
	for i := range filter.Data {
		filter.Data[i] = 0xffffffff
	}
	filter.Data[typeRouterAdvertisement>>5] &^= 1 << (typeRouterAdvertisement & 31)
	if err := unix.SetsockoptICMPv6Filter(fd, unix.SOL_ICMPV6, unix.ICMPV6_FILTER, &filter); err != nil {
		return RA{}, fmt.Errorf("ICMPv6 filter: %w", err)
	}
	for _, o := range []struct{ opt, v int }{
		{unix.IPV6_MULTICAST_HOPS, 255},
		{unix.IPV6_RECVHOPLIMIT, 1},
		{unix.IPV6_MULTICAST_IF, index},
	} {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, o.opt, o.v); err != nil {
			return RA{}, fmt.Errorf("ICMPv6 socket option %d: %w", o.opt, err)
		}
	}
	allRouters := &unix.SockaddrInet6{Addr: netip.MustParseAddr("ff02::2").As16(), ZoneId: uint32(index)}
	rs := routerSolicitation(mac)
	buf, oob := make([]byte, 1500), make([]byte, 128)
	var nextSend time.Time
	var sendErr error
	for {
		if err := ctx.Err(); err != nil {
			if sendErr != nil {
				return RA{}, fmt.Errorf("no router advertisement on %s (%w; last solicitation: %v)", name, err, sendErr)
			}
			return RA{}, fmt.Errorf("no router advertisement on %s: %w", name, err)
		}
		if time.Now().After(nextSend) {
			// Fails while the link-local address is tentative; the next
			// try comes soon.
			if sendErr = unix.Sendto(fd, rs, 0, allRouters); sendErr != nil {
				nextSend = time.Now().Add(500 * time.Millisecond)
			} else {
				nextSend = time.Now().Add(SolicitInterval)
			}
		}
		tv := unix.NsecToTimeval(pollInterval.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return RA{}, fmt.Errorf("set receive timeout: %w", err)
		}
		n, oobn, _, from, err := unix.Recvmsg(fd, buf, oob, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return RA{}, fmt.Errorf("receive on %s: %w", name, err)
		}
		src, ok := from.(*unix.SockaddrInet6)
		if !ok || hopLimit(oob[:oobn]) != 255 {
			continue
		}
		ra, err := ParseRA(buf[:n])
		if err != nil {
			continue
		}
		ra.Router = netip.AddrFrom16(src.Addr)
		if !ra.Router.IsLinkLocalUnicast() {
			continue // RFC 4861 6.1.2: the source must be link-local
		}
		if _, err := ra.Address(mac); err == nil || ra.RouterLifetime > 0 || ra.Managed {
			return ra, nil
		}
	}
}

// hopLimit is the IPV6_HOPLIMIT ancillary value, -1 if absent.
func hopLimit(oob []byte) int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return -1
	}
	for _, m := range msgs {
		if m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT && len(m.Data) >= 4 {
			return int(int32(binary.NativeEndian.Uint32(m.Data)))
		}
	}
	return -1
}
