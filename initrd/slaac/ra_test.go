package slaac

import (
	"encoding/binary"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

var testMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}

// raBytes builds an RA: flags, router lifetime, then raw options.
func raBytes(flags byte, lifetime uint16, opts ...[]byte) []byte {
	b := []byte{typeRouterAdvertisement, 0, 0, 0, 64, flags, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(b[6:], lifetime)
	for _, o := range opts {
		b = append(b, o...)
	}
	return b
}

func prefixOpt(p string, flags byte, valid, preferred uint32) []byte {
	pp := netip.MustParsePrefix(p)
	o := []byte{optPrefixInfo, 4, byte(pp.Bits()), flags}
	o = binary.BigEndian.AppendUint32(o, valid)
	o = binary.BigEndian.AppendUint32(o, preferred)
	o = append(o, 0, 0, 0, 0)
	a := pp.Addr().As16()
	return append(o, a[:]...)
}

func rdnssOpt(lifetime uint32, addrs ...string) []byte {
	o := []byte{optRDNSS, byte(1 + 2*len(addrs)), 0, 0}
	o = binary.BigEndian.AppendUint32(o, lifetime)
	for _, s := range addrs {
		a := netip.MustParseAddr(s).As16()
		o = append(o, a[:]...)
	}
	return o
}

func mtuOpt(mtu uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{optMTU, 1, 0, 0}, mtu)
}

// slirpRA is what QEMU's user network advertises (libslirp ndp_send_ra).
var slirpRA = raBytes(0, 1800,
	prefixOpt("fec0::/64", 0xc0, 86400, 14400),
	[]byte{optSourceLinkAddr, 1, 0x52, 0x55, 0x0a, 0x00, 0x02, 0x02},
	rdnssOpt(600, "fec0::3"))

func TestParseRA(t *testing.T) {
	for _, tc := range []struct {
		name     string
		in       []byte
		want     RA
		wantAddr string // "" means ErrNoSLAAC
		wantErr  string
	}{
		{name: "slirp", in: slirpRA, want: RA{RouterLifetime: 1800 * time.Second,
			Prefixes: []Prefix{{Prefix: netip.MustParsePrefix("fec0::/64"), OnLink: true, Autonomous: true, Valid: 86400 * time.Second, Preferred: 14400 * time.Second}},
			RDNSS:    []netip.Addr{netip.MustParseAddr("fec0::3")}},
			wantAddr: "fec0::5054:ff:fe12:3456/64"},
		{name: "managed, prefix not autonomous, MTU", in: raBytes(0xc0, 600, prefixOpt("fd00:1::/64", 0x80, 3600, 3600), mtuOpt(1400)),
			want: RA{Managed: true, Other: true, RouterLifetime: 600 * time.Second, MTU: 1400,
				Prefixes: []Prefix{{Prefix: netip.MustParsePrefix("fd00:1::/64"), OnLink: true, Valid: time.Hour, Preferred: time.Hour}}}},
		{name: "infinite lifetime, /48 skipped, second /64 used", in: raBytes(0, 0, prefixOpt("fd00:2::/48", 0xc0, 0xffffffff, 0xffffffff), prefixOpt("fd00:3::/64", 0x40, 0xffffffff, 0xffffffff)),
			want: RA{Prefixes: []Prefix{
				{Prefix: netip.MustParsePrefix("fd00:2::/48"), OnLink: true, Autonomous: true, Valid: 1<<63 - 1, Preferred: 1<<63 - 1},
				{Prefix: netip.MustParsePrefix("fd00:3::/64"), Autonomous: true, Valid: 1<<63 - 1, Preferred: 1<<63 - 1}}},
			wantAddr: "fd00:3::5054:ff:fe12:3456/64"},
		{name: "withdrawn prefix and DNS", in: raBytes(0, 600, prefixOpt("fd00:4::/64", 0xc0, 0, 0), rdnssOpt(0, "fd00::53")),
			want: RA{RouterLifetime: 600 * time.Second, Prefixes: []Prefix{{Prefix: netip.MustParsePrefix("fd00:4::/64"), OnLink: true, Autonomous: true}}}},
		{name: "two DNS servers, unknown option skipped", in: raBytes(0, 600, []byte{31, 1, 0, 0, 0, 0, 0, 0}, rdnssOpt(60, "fd00::53", "fd00::54")),
			want: RA{RouterLifetime: 600 * time.Second, RDNSS: []netip.Addr{netip.MustParseAddr("fd00::53"), netip.MustParseAddr("fd00::54")}}},
		{name: "prefix bits beyond the length masked", in: raBytes(0, 0, prefixOpt("fd00:5::/64", 0xc0, 1, 1)[:16:16], prefixOpt("fd00:5::/64", 0xc0, 1, 1)[16:]),
			want:     RA{Prefixes: []Prefix{{Prefix: netip.MustParsePrefix("fd00:5::/64"), OnLink: true, Autonomous: true, Valid: time.Second, Preferred: time.Second}}},
			wantAddr: "fd00:5::5054:ff:fe12:3456/64"},
		{name: "short", in: slirpRA[:15], wantErr: "15 bytes"},
		{name: "not an RA", in: append([]byte{133}, slirpRA[1:]...), wantErr: "ICMPv6 type 133"},
		{name: "zero-length option", in: raBytes(0, 0, []byte{3, 0, 0, 0, 0, 0, 0, 0}), wantErr: "length 0"},
		{name: "option overruns", in: raBytes(0, 0, prefixOpt("fd00::/64", 0xc0, 1, 1)[:24]), wantErr: "32 bytes announced, 24 left"},
		{name: "one byte left", in: append(raBytes(0, 0), 3), wantErr: "truncated"},
		{name: "prefix option too short", in: raBytes(0, 0, []byte{3, 1, 64, 0xc0, 0, 0, 0, 0}), wantErr: "prefix information of 8 bytes"},
		{name: "prefix length 129", in: raBytes(0, 0, func() []byte { o := prefixOpt("fd00::/64", 0xc0, 1, 1); o[2] = 129; return o }()), wantErr: "prefix length 129"},
		{name: "RDNSS without address", in: raBytes(0, 0, []byte{25, 1, 0, 0, 0, 0, 0, 1}), wantErr: "RDNSS option of 8 bytes"},
		{name: "MTU option too long", in: raBytes(0, 0, append([]byte{5, 2}, make([]byte, 14)...)), wantErr: "MTU option of 16 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRA(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			addr, err := got.Address(testMAC)
			if tc.wantAddr == "" {
				if err != ErrNoSLAAC {
					t.Errorf("address %v, %v; want ErrNoSLAAC", addr, err)
				}
			} else if err != nil || addr.String() != tc.wantAddr {
				t.Errorf("address %v, %v; want %s", addr, err, tc.wantAddr)
			}
		})
	}
}

func TestEUI64(t *testing.T) {
	for _, tc := range []struct{ mac, want string }{
		{"52:54:00:12:34:56", "50 54 00 ff fe 12 34 56"},
		{"00:1b:21:aa:bb:cc", "02 1b 21 ff fe aa bb cc"},
		{"02:00:00:00:00:02", "00 00 00 ff fe 00 00 02"},
	} {
		mac, _ := net.ParseMAC(tc.mac)
		got := strings.TrimSpace(strings.ReplaceAll(string(spaced(EUI64(mac))), "  ", " "))
		if got != tc.want {
			t.Errorf("EUI64(%s) = %s, want %s", tc.mac, got, tc.want)
		}
	}
	if _, err := (RA{}).Address(net.HardwareAddr{1, 2, 3}); err == nil {
		t.Error("3-byte MAC accepted")
	}
}

func spaced(b []byte) []byte {
	const hex = "0123456789abcdef"
	var out []byte
	for i, c := range b {
		if i > 0 {
			out = append(out, ' ')
		}
		out = append(out, hex[c>>4], hex[c&15])
	}
	return out
}

func TestRouterSolicitation(t *testing.T) {
	rs := routerSolicitation(testMAC)
	if len(rs) != 16 || rs[0] != 133 || rs[8] != optSourceLinkAddr || rs[9] != 1 || net.HardwareAddr(rs[10:]).String() != testMAC.String() {
		t.Errorf("RS % x", rs)
	}
}

func FuzzParseRA(f *testing.F) {
	f.Add(slirpRA)
	f.Add(raBytes(0xc0, 600, prefixOpt("fd00:1::/64", 0x80, 3600, 3600), mtuOpt(1400)))
	f.Add(raBytes(0, 0, []byte{25, 3}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ra, err := ParseRA(b)
		if err != nil {
			return
		}
		for _, p := range ra.Prefixes {
			if !p.Prefix.IsValid() || p.Prefix.Bits() > 128 {
				t.Fatalf("invalid prefix %v", p.Prefix)
			}
		}
		if a, err := ra.Address(testMAC); err == nil && (a.Bits() != 64 || !a.Addr().Is6()) {
			t.Fatalf("address %v", a)
		}
		ra.OnLink()
	})
}
