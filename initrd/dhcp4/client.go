package dhcp4

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// Timeouts are the waits for a reply before each retransmission, growing
// as RFC 2131 4.1 suggests.
var Timeouts = []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}

var broadcastAddr = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// pollInterval bounds one blocking receive, so a cancelled context ends
// the exchange promptly.
const pollInterval = 200 * time.Millisecond

// packetConn sends and receives IPv4 packets on one interface, below the
// IP stack.
type packetConn struct {
	fd    int
	index int
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openPacketConn(name string, index int) (*packetConn, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind packet socket to %s: %w", name, err)
	}
	return &packetConn{fd: fd, index: index}, nil
}

func (c *packetConn) close() { unix.Close(c.fd) }

func (c *packetConn) sendBroadcast(payload []byte) error {
	pkt := encodeUDP4(netip.IPv4Unspecified(), broadcastAddr, dhcpClientPort, dhcpServerPort, payload)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: c.index, Halen: 6,
		Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	return unix.Sendto(c.fd, pkt, 0, to)
}

var errTimeout = errors.New("timed out")

// receive returns the next DHCP reply for xid before deadline.
func (c *packetConn) receive(ctx context.Context, xid uint32, mac net.HardwareAddr, deadline time.Time) (*dhcpMessage, error) {
	buf := make([]byte, 2048)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, errTimeout
		}
		tv := unix.NsecToTimeval(min(left, pollInterval).Nanoseconds())
		if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return nil, fmt.Errorf("set receive timeout: %w", err)
		}
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		payload, err := decodeUDP4(buf[:n], dhcpClientPort)
		if err != nil {
			continue
		}
		m, err := decodeDHCP(payload)
		if err != nil || m.Op != bootReply || m.XID != xid || !bytes.Equal(m.CHAddr, mac) {
			continue
		}
		return m, nil
	}
}

// Exchange runs DISCOVER/OFFER/REQUEST/ACK on the interface (name, index,
// mac) and returns the lease. It talks through a packet socket: the
// interface has no address yet. It stops when ctx is done.
func Exchange(ctx context.Context, name string, index int, mac net.HardwareAddr) (Lease, error) {
	c, err := openPacketConn(name, index)
	if err != nil {
		return Lease{}, err
	}
	defer c.close()
	var x [4]byte
	if _, err := rand.Read(x[:]); err != nil {
		return Lease{}, fmt.Errorf("random transaction id: %w", err)
	}
	xid := binary.BigEndian.Uint32(x[:])
	start := time.Now()
	secs := func() uint16 { return uint16(min(time.Since(start)/time.Second, 0xffff)) }

	// exchange sends msg and waits for a reply of type want, resending with
	// growing timeouts.
	exchange := func(build func() *dhcpMessage, want byte) (*dhcpMessage, error) {
		for _, timeout := range Timeouts {
			pkt, err := build().encode()
			if err != nil {
				return nil, err
			}
			if err := c.sendBroadcast(pkt); err != nil {
				return nil, fmt.Errorf("send: %w", err)
			}
			deadline := time.Now().Add(timeout)
			for {
				m, err := c.receive(ctx, xid, mac, deadline)
				if errors.Is(err, errTimeout) {
					break
				}
				if err != nil {
					return nil, err
				}
				switch m.messageType() {
				case want:
					return m, nil
				case dhcpNak:
					return nil, errors.New("server refused the request (NAK)")
				}
			}
		}
		var total time.Duration
		for _, t := range Timeouts {
			total += t
		}
		return nil, fmt.Errorf("no DHCP %s within %v", map[byte]string{dhcpOffer: "offer", dhcpAck: "acknowledgement"}[want], total)
	}

	offer, err := exchange(func() *dhcpMessage { return newDiscover(xid, mac, secs()) }, dhcpOffer)
	if err != nil {
		return Lease{}, err
	}
	if _, err := offer.lease(); err != nil {
		return Lease{}, err
	}
	ack, err := exchange(func() *dhcpMessage { return newRequest(xid, mac, secs(), offer) }, dhcpAck)
	if err != nil {
		return Lease{}, err
	}
	return ack.lease()
}
