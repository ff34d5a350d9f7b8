package dhcp6

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

const testIAID = 2

func iaaddr(a string, preferred, valid uint32) Option {
	b := netip.MustParseAddr(a).AsSlice()
	b = binary.BigEndian.AppendUint32(b, preferred)
	b = binary.BigEndian.AppendUint32(b, valid)
	return Option{optIAAddr, b}
}

func status(code uint16, msg string) Option {
	return Option{optStatusCode, append(binary.BigEndian.AppendUint16(nil, code), msg...)}
}

func dns(addrs ...string) Option {
	var b []byte
	for _, a := range addrs {
		b = append(b, netip.MustParseAddr(a).AsSlice()...)
	}
	return Option{optDNS, b}
}

// reply is a server's REPLY with the given options after the IDs.
func reply(opts ...Option) []byte {
	m := &Message{Type: msgReply, TxID: [3]byte{1, 2, 3}, Options: append([]Option{
		{optClientID, duid(testMAC)}, {optServerID, []byte{0, 1, 0, 1, 9, 9, 9, 9}},
	}, opts...)}
	return m.encode()
}

func TestLease(t *testing.T) {
	goodIA := Option{optIANA, iana(testIAID, []Option{iaaddr("fd00:db8::105", 1800, 3600)})}
	for _, tc := range []struct {
		name    string
		in      []byte
		want    Lease
		wantErr string
	}{
		{name: "address and DNS", in: reply(goodIA, dns("fd00:db8::53", "fd00:db8::54"), Option{optBootFileURL, []byte("http://[fd00:db8::1]/uki.efi")}),
			want: Lease{Addr: netip.MustParseAddr("fd00:db8::105"), Valid: time.Hour,
				DNS:      []netip.Addr{netip.MustParseAddr("fd00:db8::53"), netip.MustParseAddr("fd00:db8::54")},
				ServerID: []byte{0, 1, 0, 1, 9, 9, 9, 9}, BootFileURL: "http://[fd00:db8::1]/uki.efi"}},
		{name: "other IAID ignored", in: reply(Option{optIANA, iana(7, []Option{iaaddr("fd00:db8::7", 1, 1)})}, goodIA),
			want: Lease{Addr: netip.MustParseAddr("fd00:db8::105"), Valid: time.Hour, ServerID: []byte{0, 1, 0, 1, 9, 9, 9, 9}}},
		{name: "withdrawn address skipped", in: reply(Option{optIANA, iana(testIAID, []Option{iaaddr("fd00:db8::1", 0, 0), iaaddr("fd00:db8::2", 60, 60)})}),
			want: Lease{Addr: netip.MustParseAddr("fd00:db8::2"), Valid: time.Minute, ServerID: []byte{0, 1, 0, 1, 9, 9, 9, 9}}},
		{name: "no addrs available", in: reply(Option{optIANA, iana(testIAID, []Option{status(statusNoAddrsAvail, "none left")})}), wantErr: `no addresses available (status 2) "none left"`},
		{name: "message status", in: reply(status(4, "not on link"), goodIA), wantErr: `status 4 "not on link"`},
		{name: "no IA", in: reply(), wantErr: "offers no address"},
		{name: "link-local address", in: reply(Option{optIANA, iana(testIAID, []Option{iaaddr("fe80::1", 1, 1)})}), wantErr: "unusable address fe80::1"},
		{name: "short IA_NA", in: reply(Option{optIANA, []byte{0, 0, 0, 2}}), wantErr: "IA_NA of 4 bytes"},
		{name: "short IA address", in: reply(Option{optIANA, iana(testIAID, []Option{{optIAAddr, make([]byte, 20)}})}), wantErr: "IA address option of 20 bytes"},
		{name: "IA_NA inner overrun", in: reply(Option{optIANA, append(iana(testIAID, nil), 0, 5, 0, 24, 1)}), wantErr: "in IA_NA: dhcp6: option 5 at byte 0: 24 bytes announced, 1 left"},
		{name: "odd DNS", in: reply(goodIA, Option{optDNS, make([]byte, 17)}), wantErr: "DNS servers option of 17 bytes"},
		{name: "short status", in: reply(Option{optStatusCode, []byte{1}}), wantErr: "status code option of 1 bytes"},
		{name: "no server id", in: (&Message{Type: msgReply, Options: []Option{goodIA}}).encode(), wantErr: "no server identifier"},
		{name: "truncated option header", in: append(reply(goodIA), 0, 23, 0), wantErr: "option header at byte"},
		{name: "option overruns", in: append(reply(goodIA), 0, 23, 0, 32, 1, 2), wantErr: "option 23 at byte"},
		{name: "short", in: []byte{7, 1, 2}, wantErr: "3 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decode(tc.in)
			var l Lease
			if err == nil {
				l, err = m.lease(testIAID)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(l, tc.want) {
				t.Errorf("lease %+v, want %+v", l, tc.want)
			}
		})
	}
}

func TestSolicitAndRequest(t *testing.T) {
	s := newSolicit([3]byte{0xa, 0xb, 0xc}, testMAC, testIAID, 1500*time.Millisecond).encode()
	want := []byte{1, 0xa, 0xb, 0xc,
		0, 1, 0, 10, 0, 3, 0, 1, 0x52, 0x54, 0x00, 0x12, 0x34, 0x56, // client id: DUID-LL
		0, 3, 0, 12, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, // IA_NA, no address
		0, 6, 0, 4, 0, 23, 0, 59, // ORO: DNS, boot file URL
		0, 8, 0, 2, 0, 150, // elapsed: 150 hundredths
	}
	if !bytes.Equal(s, want) {
		t.Errorf("solicit\n got % x\nwant % x", s, want)
	}
	adv, err := decode(reply(Option{optIANA, iana(testIAID, []Option{iaaddr("fd00:db8::105", 1800, 3600)})}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := decode(newRequest([3]byte{1, 1, 1}, testMAC, testIAID, 0, adv).encode())
	if err != nil {
		t.Fatal(err)
	}
	if r.Type != msgRequest || !bytes.Equal(r.option(optServerID), adv.option(optServerID)) {
		t.Errorf("request %+v", r)
	}
	// The request names the advertised address in its IA_NA.
	if !bytes.Contains(r.option(optIANA), netip.MustParseAddr("fd00:db8::105").AsSlice()) {
		t.Errorf("request IA_NA % x", r.option(optIANA))
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(reply(Option{optIANA, iana(testIAID, []Option{iaaddr("fd00:db8::105", 1800, 3600)})}, dns("fd00::53")))
	f.Add(newSolicit([3]byte{}, testMAC, 1, 0).encode())
	f.Add([]byte{7, 0, 0, 0, 0, 3, 0, 12})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decode(b)
		if err != nil {
			return
		}
		if !bytes.Equal(m.encode(), b) {
			t.Fatalf("re-encoding differs")
		}
		if l, err := m.lease(testIAID); err == nil && (!l.Addr.Is6() || l.Addr.IsLinkLocalUnicast()) {
			t.Fatalf("lease address %v", l.Addr)
		}
		newRequest(m.TxID, testMAC, testIAID, 0, m)
	})
}
