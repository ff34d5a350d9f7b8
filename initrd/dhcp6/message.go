// Package dhcp6 is the init's DHCPv6 client (RFC 8415): one address
// (IA_NA) and the DNS servers (RFC 3646, option 23). DHCPv6 gives no
// prefix length and no routes; those come from router advertisements
// (package slaac).
package dhcp6

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Message types.
const (
	msgSolicit   = 1
	msgAdvertise = 2
	msgRequest   = 3
	msgReply     = 7
)

// Option codes.
const (
	optClientID    = 1
	optServerID    = 2
	optIANA        = 3
	optIAAddr      = 5
	optORO         = 6
	optElapsedTime = 8
	optStatusCode  = 13
	optDNS         = 23
	optBootFileURL = 59
)

// Status codes (option 13) that matter here.
const (
	statusSuccess      = 0
	statusNoAddrsAvail = 2
)

const headerLen = 4 // message type and transaction id

// Option is one option, kept in order so encoding is deterministic.
type Option struct {
	Code uint16
	Data []byte
}

// Message is a client/server message.
type Message struct {
	Type    byte
	TxID    [3]byte
	Options []Option
}

func (m *Message) option(code uint16) []byte {
	return findOption(m.Options, code)
}

func findOption(opts []Option, code uint16) []byte {
	for _, o := range opts {
		if o.Code == code {
			return o.Data
		}
	}
	return nil
}

func (m *Message) encode() []byte {
	b := []byte{m.Type, m.TxID[0], m.TxID[1], m.TxID[2]}
	return appendOptions(b, m.Options)
}

func appendOptions(b []byte, opts []Option) []byte {
	for _, o := range opts {
		b = binary.BigEndian.AppendUint16(b, o.Code)
		b = binary.BigEndian.AppendUint16(b, uint16(len(o.Data)))
		b = append(b, o.Data...)
	}
	return b
}

// decode parses a message; every length is checked before use.
func decode(b []byte) (*Message, error) {
	if len(b) < headerLen {
		return nil, fmt.Errorf("dhcp6: %d bytes, want at least %d", len(b), headerLen)
	}
	opts, err := parseOptions(b[headerLen:], headerLen)
	if err != nil {
		return nil, err
	}
	return &Message{Type: b[0], TxID: [3]byte(b[1:4]), Options: opts}, nil
}

// parseOptions splits b into options; base is b's offset in the message,
// for error messages.
func parseOptions(b []byte, base int) ([]Option, error) {
	var out []Option
	for off := 0; off < len(b); {
		if len(b)-off < 4 {
			return nil, fmt.Errorf("dhcp6: option header at byte %d truncated", base+off)
		}
		code, n := binary.BigEndian.Uint16(b[off:]), int(binary.BigEndian.Uint16(b[off+2:]))
		if off+4+n > len(b) {
			return nil, fmt.Errorf("dhcp6: option %d at byte %d: %d bytes announced, %d left", code, base+off, n, len(b)-off-4)
		}
		out = append(out, Option{Code: code, Data: append([]byte(nil), b[off+4:off+4+n]...)})
		off += 4 + n
	}
	return out, nil
}

// Lease is what a REPLY grants.
type Lease struct {
	Addr        netip.Addr // from IA_NA; a /128, the prefix comes from an RA
	Valid       time.Duration
	DNS         []netip.Addr
	ServerID    []byte
	BootFileURL string // option 59, if the server sent it
}

func (l Lease) String() string {
	s := "address " + l.Addr.String()
	if len(l.DNS) > 0 {
		s += fmt.Sprintf(", DNS %v", l.DNS)
	}
	return s
}

// statusError reads a status code option; nil for success or absence.
func statusError(d []byte, where string) error {
	if d == nil {
		return nil
	}
	if len(d) < 2 {
		return fmt.Errorf("dhcp6: %s: status code option of %d bytes", where, len(d))
	}
	if code := binary.BigEndian.Uint16(d); code != statusSuccess {
		msg := string(d[2:])
		if code == statusNoAddrsAvail {
			return fmt.Errorf("dhcp6: %s: no addresses available (status 2) %q", where, msg)
		}
		return fmt.Errorf("dhcp6: %s: status %d %q", where, code, msg)
	}
	return nil
}

// lease extracts the address of the IA_NA with iaid and the DNS servers
// from an ADVERTISE or REPLY.
func (m *Message) lease(iaid uint32) (Lease, error) {
	if err := statusError(m.option(optStatusCode), "message"); err != nil {
		return Lease{}, err
	}
	l := Lease{ServerID: m.option(optServerID)}
	if len(l.ServerID) == 0 {
		return Lease{}, errors.New("dhcp6: no server identifier")
	}
	for _, o := range m.Options {
		if o.Code != optIANA {
			continue
		}
		if len(o.Data) < 12 {
			return Lease{}, fmt.Errorf("dhcp6: IA_NA of %d bytes, want at least 12", len(o.Data))
		}
		if binary.BigEndian.Uint32(o.Data) != iaid {
			continue
		}
		sub, err := parseOptions(o.Data[12:], 0)
		if err != nil {
			return Lease{}, fmt.Errorf("dhcp6: in IA_NA: %w", err)
		}
		if err := statusError(findOption(sub, optStatusCode), "IA_NA"); err != nil {
			return Lease{}, err
		}
		for _, s := range sub {
			if s.Code != optIAAddr {
				continue
			}
			if len(s.Data) < 24 {
				return Lease{}, fmt.Errorf("dhcp6: IA address option of %d bytes, want at least 24", len(s.Data))
			}
			valid := binary.BigEndian.Uint32(s.Data[20:])
			if valid == 0 {
				continue // withdrawn
			}
			a := netip.AddrFrom16([16]byte(s.Data[:16]))
			if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() || a.IsLinkLocalUnicast() {
				return Lease{}, fmt.Errorf("dhcp6: server offers unusable address %s", a)
			}
			l.Addr, l.Valid = a, time.Duration(valid)*time.Second
			break
		}
	}
	if !l.Addr.IsValid() {
		return Lease{}, errors.New("dhcp6: reply offers no address")
	}
	d := m.option(optDNS)
	if len(d)%16 != 0 {
		return Lease{}, fmt.Errorf("dhcp6: DNS servers option of %d bytes, not a multiple of 16", len(d))
	}
	for i := 0; i < len(d); i += 16 {
		l.DNS = append(l.DNS, netip.AddrFrom16([16]byte(d[i:i+16])))
	}
	l.BootFileURL = string(m.option(optBootFileURL))
	return l, nil
}

// duid is the client's DUID-LL (RFC 8415 11.4): type 3, hardware type 1
// (Ethernet), the MAC. Stable across boots without any storage.
func duid(mac net.HardwareAddr) []byte {
	return append([]byte{0, 3, 0, 1}, mac...)
}

func elapsed(d time.Duration) []byte {
	cs := min(d/(10*time.Millisecond), 0xffff) // hundredths of a second
	return binary.BigEndian.AppendUint16(nil, uint16(cs))
}

// iana is an IA_NA with no address (asking for one) or with the addresses
// of inner.
func iana(iaid uint32, inner []Option) []byte {
	b := binary.BigEndian.AppendUint32(nil, iaid)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0) // T1, T2: the server's choice
	return appendOptions(b, inner)
}

var oro = []byte{0, optDNS, 0, optBootFileURL}

func newSolicit(txid [3]byte, mac net.HardwareAddr, iaid uint32, since time.Duration) *Message {
	return &Message{Type: msgSolicit, TxID: txid, Options: []Option{
		{optClientID, duid(mac)},
		{optIANA, iana(iaid, nil)},
		{optORO, oro},
		{optElapsedTime, elapsed(since)},
	}}
}

// newRequest asks the server of adv for the address it advertised.
func newRequest(txid [3]byte, mac net.HardwareAddr, iaid uint32, since time.Duration, adv *Message) *Message {
	var inner []Option
	for _, o := range adv.Options {
		if o.Code == optIANA && len(o.Data) >= 12 && binary.BigEndian.Uint32(o.Data) == iaid {
			if sub, err := parseOptions(o.Data[12:], 0); err == nil {
				for _, s := range sub {
					if s.Code == optIAAddr {
						inner = append(inner, s)
					}
				}
			}
		}
	}
	return &Message{Type: msgRequest, TxID: txid, Options: []Option{
		{optClientID, duid(mac)},
		{optServerID, adv.option(optServerID)},
		{optIANA, iana(iaid, inner)},
		{optORO, oro},
		{optElapsedTime, elapsed(since)},
	}}
}
