// Package slaac is the init's IPv6 stateless autoconfiguration (RFC 4861,
// 4862, 8106): it solicits a router advertisement, and derives from it an
// address (the prefix and the MAC's modified EUI-64), the default router
// and the DNS servers (RDNSS). The kernel's own SLAAC would find the
// address too, but not the DNS servers, and not a moment the init could
// wait for; the init therefore reads the advertisement itself.
package slaac

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// ICMPv6 types and neighbour discovery option types used here.
const (
	typeRouterSolicitation  = 133
	typeRouterAdvertisement = 134

	optSourceLinkAddr = 1
	optPrefixInfo     = 3
	optMTU            = 5
	optRDNSS          = 25

	raHeaderLen = 16 // ICMPv6 header and the RA's fixed fields
)

// Prefix is a prefix information option.
type Prefix struct {
	Prefix     netip.Prefix
	OnLink     bool // L: the prefix is on this link
	Autonomous bool // A: hosts may form addresses in it
	Valid      time.Duration
	Preferred  time.Duration
}

// RA is a router advertisement.
type RA struct {
	Router         netip.Addr // the sender, a link-local address (set by the receiver)
	Managed        bool       // M: addresses come from DHCPv6
	Other          bool       // O: other configuration comes from DHCPv6
	RouterLifetime time.Duration
	MTU            uint32 // 0 if not announced
	Prefixes       []Prefix
	RDNSS          []netip.Addr
}

// ParseRA decodes a router advertisement, b starting at the ICMPv6
// header. Every length is checked before use; malformed options are
// errors, as RFC 4861 6.1.2 says to discard such messages.
func ParseRA(b []byte) (RA, error) {
	if len(b) < raHeaderLen {
		return RA{}, fmt.Errorf("router advertisement: %d bytes, want at least %d", len(b), raHeaderLen)
	}
	if b[0] != typeRouterAdvertisement || b[1] != 0 {
		return RA{}, fmt.Errorf("router advertisement: ICMPv6 type %d code %d", b[0], b[1])
	}
	ra := RA{
		Managed:        b[5]&0x80 != 0,
		Other:          b[5]&0x40 != 0,
		RouterLifetime: time.Duration(binary.BigEndian.Uint16(b[6:])) * time.Second,
	}
	opts := b[raHeaderLen:]
	for off := 0; off < len(opts); {
		if len(opts)-off < 2 {
			return RA{}, fmt.Errorf("router advertisement: option at byte %d truncated", raHeaderLen+off)
		}
		typ, n := opts[off], int(opts[off+1])*8
		if n == 0 {
			return RA{}, fmt.Errorf("router advertisement: option %d at byte %d has length 0", typ, raHeaderLen+off)
		}
		if off+n > len(opts) {
			return RA{}, fmt.Errorf("router advertisement: option %d at byte %d: %d bytes announced, %d left", typ, raHeaderLen+off, n, len(opts)-off)
		}
		o := opts[off : off+n]
		switch typ {
		case optPrefixInfo:
			if n != 32 {
				return RA{}, fmt.Errorf("router advertisement: prefix information of %d bytes, want 32", n)
			}
			bits := int(o[2])
			if bits > 128 {
				return RA{}, fmt.Errorf("router advertisement: prefix length %d", bits)
			}
			p := netip.PrefixFrom(netip.AddrFrom16([16]byte(o[16:32])), bits).Masked()
			ra.Prefixes = append(ra.Prefixes, Prefix{
				Prefix:     p,
				OnLink:     o[3]&0x80 != 0,
				Autonomous: o[3]&0x40 != 0,
				Valid:      seconds(binary.BigEndian.Uint32(o[4:])),
				Preferred:  seconds(binary.BigEndian.Uint32(o[8:])),
			})
		case optMTU:
			if n != 8 {
				return RA{}, fmt.Errorf("router advertisement: MTU option of %d bytes, want 8", n)
			}
			ra.MTU = binary.BigEndian.Uint32(o[4:])
		case optRDNSS:
			// RFC 8106: length 3 + 2 per address, at least one address.
			if n < 24 || (n-8)%16 != 0 {
				return RA{}, fmt.Errorf("router advertisement: RDNSS option of %d bytes", n)
			}
			if binary.BigEndian.Uint32(o[4:]) == 0 {
				break // lifetime 0: these servers are withdrawn
			}
			for a := 8; a < n; a += 16 {
				ra.RDNSS = append(ra.RDNSS, netip.AddrFrom16([16]byte(o[a:a+16])))
			}
		}
		off += n
	}
	return ra, nil
}

// seconds converts an RA lifetime; all ones means infinity.
func seconds(v uint32) time.Duration {
	if v == 0xffffffff {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(v) * time.Second
}

// ErrNoSLAAC is returned by Address when no prefix allows an address.
var ErrNoSLAAC = errors.New("no prefix for stateless autoconfiguration")

// Address is the SLAAC address for mac: the first autonomous /64 prefix
// with a valid lifetime and the MAC's modified EUI-64 interface identifier
// (RFC 4291 appendix A). Prefixes of other lengths cannot hold a 64-bit
// interface identifier and are skipped (RFC 4862 5.5.3 d).
func (ra RA) Address(mac net.HardwareAddr) (netip.Prefix, error) {
	if len(mac) != 6 {
		return netip.Prefix{}, fmt.Errorf("MAC %v: want 6 bytes", mac)
	}
	for _, p := range ra.Prefixes {
		if !p.Autonomous || p.Valid == 0 || p.Prefix.Bits() != 64 || p.Prefix.Addr().IsLinkLocalUnicast() {
			continue
		}
		a := p.Prefix.Addr().As16()
		copy(a[8:], EUI64(mac))
		return netip.PrefixFrom(netip.AddrFrom16(a), 64), nil
	}
	return netip.Prefix{}, ErrNoSLAAC
}

// EUI64 is the modified EUI-64 interface identifier of a 48-bit MAC: FF FE
// in the middle, the universal/local bit flipped.
func EUI64(mac net.HardwareAddr) []byte {
	return []byte{mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
}

// OnLink are the prefixes the router says are on the link.
func (ra RA) OnLink() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ra.Prefixes {
		if p.OnLink && p.Valid > 0 && !p.Prefix.Addr().IsLinkLocalUnicast() {
			out = append(out, p.Prefix)
		}
	}
	return out
}

// routerSolicitation is an RS with the source link-layer address option.
func routerSolicitation(mac net.HardwareAddr) []byte {
	b := []byte{typeRouterSolicitation, 0, 0, 0, 0, 0, 0, 0} // checksum: the kernel's
	if len(mac) == 6 {
		b = append(b, optSourceLinkAddr, 1)
		b = append(b, mac...)
	}
	return b
}
