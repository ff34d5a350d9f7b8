package netconf

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil/netns"
)

func TestBootMAC(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"console=ttyS0 BOOTIF=01-52-54-00-12-34-56", "52:54:00:12:34:56"},
		{"BOOTIF=52-54-00-12-34-56 x", "52:54:00:12:34:56"},
		{"BOOTIF=01-AA-BB-CC-DD-EE-FF", "aa:bb:cc:dd:ee:ff"},
		{"BOOTIF=garbage", ""},
		{"", ""},
	} {
		got := BootMAC(strings.Fields(tc.in))
		if (got == nil && tc.want != "") || (got != nil && got.String() != tc.want) {
			t.Errorf("BootMAC(%q) = %v, want %q", tc.in, got, tc.want)
		}
	}
}

func TestOrderNICs(t *testing.T) {
	mac := func(b byte) net.HardwareAddr { return net.HardwareAddr{2, 0, 0, 0, 0, b} }
	nics := []NIC{{Name: "eth0", MAC: mac(0)}, {Name: "eth1", MAC: mac(1), Carrier: true}, {Name: "eth2", MAC: mac(2)}}
	names := func(ns []NIC) string {
		var s []string
		for _, n := range ns {
			s = append(s, n.Name)
		}
		return strings.Join(s, " ")
	}
	if got := names(OrderNICs(nics, nil)); got != "eth1 eth0 eth2" {
		t.Errorf("no boot NIC: %s", got)
	}
	if got := names(OrderNICs(nics, mac(2))); got != "eth2 eth1 eth0" {
		t.Errorf("boot NIC eth2: %s", got)
	}
}

// TestSetupWithDnsmasq runs the whole setup, as the init does, in a
// network namespace whose only NIC faces Debian's dnsmasq in another, and
// checks what the kernel was told (iproute2) and resolv.conf. Each case is
// one kind of provisioning network.
func TestSetupWithDnsmasq(t *testing.T) {
	for _, tc := range []struct {
		name    string
		server  []string // dnsmasq arguments besides --interface
		method  string   // the winner
		want    []string // in "ip addr; ip -6 route; ip -4 route; ip link"
		wantDNS string
		need    Family // the server URL's family (AnyFamily: a host name)
		wantErr string // Setup fails saying this
	}{
		{name: "ipv6-slaac", method: "SLAAC",
			server: []string{"--enable-ra", "--dhcp-range=fd00:db8::,ra-only,64,1h", "--dhcp-option=option6:dns-server,[fd00:db8::53]", "--ra-param=s0,mtu:1400,0,900"},
			want:   []string{"inet6 fd00:db8::ff:fe00:2/64", "default via fe80::", "mtu 1400"}, wantDNS: "nameserver fd00:db8::53"},
		{name: "ipv6-dhcpv6", method: "DHCPv6",
			server: []string{"--enable-ra", "--dhcp-range=fd00:db8::100,fd00:db8::1ff,64,1h", "--dhcp-option=option6:dns-server,[fd00:db8::53]"},
			want:   []string{"inet6 fd00:db8::1", "/128", "fd00:db8::/64 dev c0", "default via fe80::"}, wantDNS: "nameserver fd00:db8::53"},
		// Both families answer: both are configured, whichever came first.
		{name: "dual-stack", method: "DHCPv4+SLAAC",
			server: []string{"--dhcp-range=192.0.2.100,192.0.2.150,255.255.255.0,1h", "--enable-ra", "--dhcp-range=fd00:db8::,ra-only,64,1h",
				"--dhcp-option=option6:dns-server,[fd00:db8::53]"},
			want:    []string{"inet 192.0.2.1", "inet6 fd00:db8::ff:fe00:2/64", "default via 192.0.2.1", "default via fe80::"},
			wantDNS: "nameserver 192.0.2.1\nnameserver fd00:db8::53"},
		// The server's URL is an IPv4 literal and only SLAAC answers: not
		// configured, though an IPv6 address came (it reaches no IPv4 server).
		{name: "ipv6-only-needs-ipv4", need: IPv4,
			server:  []string{"--enable-ra", "--dhcp-range=fd00:db8::,ra-only,64,1h"},
			wantErr: "SLAAC gave no IPv4 address, which the server's URL needs"},
		{name: "ipv4-only", method: "DHCPv4",
			server: []string{"--dhcp-range=192.0.2.100,192.0.2.150,255.255.255.0,1h", "--dhcp-option=26,1400", "--dhcp-option=121,198.51.100.0/24,192.0.2.7,0.0.0.0/0,192.0.2.1"},
			want:   []string{"inet 192.0.2.1", "default via 192.0.2.1", "198.51.100.0/24 via 192.0.2.7", "mtu 1400"}, wantDNS: "nameserver 192.0.2.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !netns.Inside() {
				srv, cli := netns.New(t), netns.New(t)
				netns.Veth(t, srv, "s0", cli, "c0")
				srv.Run(t, "ip", "addr", "add", "192.0.2.1/24", "dev", "s0")
				srv.Run(t, "ip", "addr", "add", "fd00:db8::1/64", "dev", "s0", "nodad")
				log := srv.Dnsmasq(t, append([]string{"--interface=s0", "--dhcp-option=6,192.0.2.1"}, tc.server...)...)
				defer func() {
					if t.Failed() {
						t.Logf("dnsmasq:\n%s", log())
					}
				}()
				// The client's link comes up in Setup, as in the init.
				cli.Run(t, "ip", "link", "set", "c0", "down")
				netns.RunInside(t, cli)
				return
			}
			ResolvConf = filepath.Join(t.TempDir(), "resolv.conf")
			if len(strings.Split(tc.method, "+")) > 1 {
				Grace = 10 * time.Second // a loaded test machine is slow
			}
			var lines []string
			start := time.Now()
			if tc.wantErr != "" {
				Rounds, AttemptTimeout = 1, 8*time.Second
			}
			err := Setup(nil, tc.need, func(f string, a ...any) {
				line := strings.TrimSpace(strings.ReplaceAll(sprintf(f, a...), "\n", " "))
				lines = append(lines, line)
				t.Log(line)
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Setup: %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("configured after %v", time.Since(start).Round(time.Millisecond))
			methods := strings.Split(tc.method, "+")
			for _, m := range methods {
				if !strings.Contains(strings.Join(lines, "\n"), "by "+m+":") {
					t.Errorf("not configured by %s:\n%s", m, strings.Join(lines, "\n"))
				}
			}
			var state strings.Builder
			for _, args := range [][]string{{"addr"}, {"-6", "route"}, {"-4", "route"}, {"link"}} {
				out, err := exec.Command("ip", args...).CombinedOutput()
				if err != nil {
					t.Fatalf("ip %v: %v\n%s", args, err, out)
				}
				state.Write(out)
			}
			for _, w := range tc.want {
				if !strings.Contains(state.String(), w) {
					t.Errorf("want %q in:\n%s", w, state.String())
				}
			}
			rc, err := os.ReadFile(ResolvConf)
			// Exactly these servers: RDNSS repeating DHCPv6's are listed once.
			// Exactly these servers, each once, after the header naming the
			// methods in the order they answered.
			body, _ := strings.CutPrefix(string(rc), "# written by osb-init from ")
			header, servers, _ := strings.Cut(body, "\n")
			got := strings.Split(strings.TrimSpace(servers), "\n")
			want := strings.Split(tc.wantDNS, "\n")
			slices.Sort(got)
			if err != nil || !slices.Equal(got, want) || len(strings.Split(header, ", ")) != len(methods) {
				t.Errorf("resolv.conf %q (%v), want %q", rc, err, tc.wantDNS)
			}
		})
	}
}

// TestAcquireCancelled: with no server at all both methods give up when
// the attempt's time is over, and say why.
func TestAcquireCancelled(t *testing.T) {
	ifi := netns.LoneLink(t)
	if ifi == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := Acquire(ctx, NIC{Name: ifi.Name, Index: ifi.Index, MAC: ifi.HardwareAddr}, AnyFamily, t.Logf)
	if err == nil || !strings.Contains(err.Error(), "DHCPv4") || !strings.Contains(err.Error(), "no router advertisement on c0") {
		t.Errorf("error %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("took %v", d)
	}
}

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }

func TestFamilyOf(t *testing.T) {
	for url, want := range map[string]Family{
		"http://10.0.2.2:8080/b/x/disk.raw":  IPv4,
		"https://[fd00:db8::1]:443/root.img": IPv6,
		"http://[::ffff:192.0.2.1]/x":        IPv4,
		"http://images.example.com/disk.raw": AnyFamily,
		"":                                   AnyFamily,
		"http://%zz":                         AnyFamily,
	} {
		if got := FamilyOf(url); got != want {
			t.Errorf("FamilyOf(%q) = %s, want %s", url, got, want)
		}
	}
}
