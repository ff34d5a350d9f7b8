package dhcp4

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// The DHCP client talks through a packet socket, below the IP stack: the
// interface has no address yet, so the kernel would drop unicast replies
// to the offered address and refuse to pick a source for broadcasts. It
// therefore frames IPv4 and UDP itself.

const (
	ipv4HeaderLen = 20
	udpHeaderLen  = 8
	protoUDP      = 17
)

// checksum is the Internet checksum (RFC 1071) of b, starting from sum.
func checksum(sum uint32, b []byte) uint16 {
	for len(b) >= 2 {
		sum += uint32(b[0])<<8 | uint32(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint32(b[0]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// encodeUDP4 wraps payload in UDP and IPv4 headers.
func encodeUDP4(src, dst netip.Addr, srcPort, dstPort uint16, payload []byte) []byte {
	total := ipv4HeaderLen + udpHeaderLen + len(payload)
	b := make([]byte, total)
	s, d := src.As4(), dst.As4()
	ip := b[:ipv4HeaderLen]
	ip[0] = 0x45 // version 4, 5 words of header
	binary.BigEndian.PutUint16(ip[2:], uint16(total))
	ip[8] = 64 // TTL
	ip[9] = protoUDP
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(0, ip))

	udp := b[ipv4HeaderLen:]
	binary.BigEndian.PutUint16(udp[0:], srcPort)
	binary.BigEndian.PutUint16(udp[2:], dstPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpHeaderLen+len(payload)))
	copy(udp[udpHeaderLen:], payload)
	// The UDP checksum covers a pseudo header of addresses, protocol and
	// length.
	var pseudo uint32
	for _, w := range [][]byte{s[:], d[:]} {
		pseudo += (uint32(w[0])<<8 | uint32(w[1])) + (uint32(w[2])<<8 | uint32(w[3]))
	}
	pseudo += protoUDP + uint32(udpHeaderLen+len(payload))
	c := checksum(pseudo, udp)
	if c == 0 {
		c = 0xffff // 0 means "no checksum"
	}
	binary.BigEndian.PutUint16(udp[6:], c)
	return b
}

var errNotForUs = errors.New("not a UDP packet for this port")

// decodeUDP4 returns the UDP payload of an IPv4 packet sent to dstPort.
// Fragments and other protocols are errNotForUs; checksums are not checked
// (the Ethernet CRC has already been, and DHCP validates its own fields).
func decodeUDP4(b []byte, dstPort uint16) ([]byte, error) {
	if len(b) < ipv4HeaderLen || b[0]>>4 != 4 {
		return nil, errNotForUs
	}
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	if ihl < ipv4HeaderLen || total < ihl+udpHeaderLen || total > len(b) || b[9] != protoUDP {
		return nil, errNotForUs
	}
	if frag := binary.BigEndian.Uint16(b[6:]); frag&0x3fff != 0 { // MF or offset
		return nil, errNotForUs
	}
	udp := b[ihl:total]
	if binary.BigEndian.Uint16(udp[2:]) != dstPort {
		return nil, errNotForUs
	}
	ulen := int(binary.BigEndian.Uint16(udp[4:]))
	if ulen < udpHeaderLen || ulen > len(udp) {
		return nil, errNotForUs
	}
	return udp[udpHeaderLen:ulen], nil
}
