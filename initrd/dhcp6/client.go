package dhcp6

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Timeouts are the waits before each retransmission (RFC 8415 15: the
// timeout doubles, starting near 1 s); the exchange gives up after them.
var Timeouts = []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}

const (
	clientPort = 546
	serverPort = 547
)

// allServers is All_DHCP_Relay_Agents_and_Servers.
var allServers = netip.MustParseAddr("ff02::1:2")

// Exchange runs SOLICIT/ADVERTISE/REQUEST/REPLY on the interface (name,
// index, mac) and returns the lease. The interface needs its link-local
// address: until duplicate address detection has passed, sends fail and
// are retried. It stops when ctx is done.
func Exchange(ctx context.Context, name string, index int, mac net.HardwareAddr) (Lease, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.BindToDevice(int(fd), name); serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(ctx, "udp6", fmt.Sprintf("[::]:%d", clientPort))
	if err != nil {
		return Lease{}, fmt.Errorf("dhcp6 socket on %s: %w", name, err)
	}
	conn := pc.(*net.UDPConn)
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	var txid [3]byte
	if _, err := rand.Read(txid[:]); err != nil {
		return Lease{}, fmt.Errorf("random transaction id: %w", err)
	}
	iaid := uint32(index)
	start := time.Now()
	to := net.UDPAddrFromAddrPort(netip.AddrPortFrom(allServers.WithZone(name), serverPort))
	buf := make([]byte, 2048)

	// exchange sends a message and waits for a reply of type want.
	exchange := func(build func() *Message, want byte) (*Message, error) {
		var lastErr error
		for _, timeout := range Timeouts {
			// A send fails while the link-local address is tentative
			// (duplicate address detection, about a second after link
			// up); that costs no retransmission.
			for {
				_, err := conn.WriteToUDP(build().encode(), to)
				if err == nil {
					break
				}
				lastErr = err
				select {
				case <-ctx.Done():
					return nil, fmt.Errorf("%w (last send: %v)", ctx.Err(), err)
				case <-time.After(250 * time.Millisecond):
				}
			}
			conn.SetReadDeadline(time.Now().Add(timeout))
			for {
				n, _, err := conn.ReadFromUDP(buf)
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if isTimeout(err) {
					break
				}
				if err != nil {
					return nil, fmt.Errorf("dhcp6 receive on %s: %w", name, err)
				}
				m, err := decode(buf[:n])
				if err != nil || m.Type != want || m.TxID != txid || !bytes.Equal(m.option(optClientID), duid(mac)) {
					continue
				}
				if _, err := m.lease(iaid); err != nil {
					lastErr = err
					continue // another server may have an address
				}
				return m, nil
			}
		}
		if lastErr != nil {
			return nil, fmt.Errorf("no DHCPv6 %s on %s: %w", map[byte]string{msgAdvertise: "advertise", msgReply: "reply"}[want], name, lastErr)
		}
		return nil, fmt.Errorf("no DHCPv6 %s on %s", map[byte]string{msgAdvertise: "advertise", msgReply: "reply"}[want], name)
	}
	adv, err := exchange(func() *Message { return newSolicit(txid, mac, iaid, time.Since(start)) }, msgAdvertise)
	if err != nil {
		return Lease{}, err
	}
	rand.Read(txid[:]) // a new transaction for the request
	reply, err := exchange(func() *Message { return newRequest(txid, mac, iaid, time.Since(start), adv) }, msgReply)
	if err != nil {
		return Lease{}, err
	}
	return reply.lease(iaid)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
