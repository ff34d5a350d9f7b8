// Package netconf brings the init onto the network: it finds the NICs,
// brings them up and configures the first that gets a usable address and
// route, by DHCPv4 (package dhcp4) or IPv6 (package slaac, and dhcp6 when
// the router says so), which run in parallel on each NIC.
package netconf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ironcore-dev/os-builder/initrd/dhcp4"
	"github.com/ironcore-dev/os-builder/initrd/dhcp6"
	"github.com/ironcore-dev/os-builder/initrd/netlink"
	"github.com/ironcore-dev/os-builder/initrd/slaac"
)

// Network timing. NIC drivers probe asynchronously and links take seconds to
// negotiate, so the init waits for them.
var (
	NICWait     = 20 * time.Second // for the first NIC to appear
	CarrierWait = 10 * time.Second // for links to come up
	// AttemptTimeout bounds one NIC's attempt: DHCPv4's retransmissions
	// (dhcp4.Timeouts, twice) fit in it.
	AttemptTimeout = 30 * time.Second
	// Grace is how long the other family may still finish once one has
	// configured the NIC: on a dual-stack network both get configured, so
	// a URL of either family works.
	Grace       = 2 * time.Second
	Rounds      = 3 // passes over all candidate NICs
	ResolvConf  = "/etc/resolv.conf"
	SysClassNet = "/sys/class/net"
)

// NIC is a network interface the init may configure.
type NIC struct {
	Name    string
	Index   int
	MAC     net.HardwareAddr
	Carrier bool
}

// Config is what one method found for a NIC: everything needed to use it.
type Config struct {
	Method string // DHCPv4, SLAAC, DHCPv6
	Addrs  []netip.Prefix
	Routes []netlink.Route
	DNS    []netip.Addr
	MTU    uint32 // 0: leave it
}

func (c Config) String() string {
	var parts []string
	for _, a := range c.Addrs {
		parts = append(parts, "address "+a.String())
	}
	for _, r := range c.Routes {
		parts = append(parts, "route "+r.String())
	}
	if len(c.DNS) > 0 {
		parts = append(parts, fmt.Sprintf("DNS %v", c.DNS))
	}
	if c.MTU > 0 {
		parts = append(parts, fmt.Sprintf("MTU %d", c.MTU))
	}
	return c.Method + ": " + strings.Join(parts, ", ")
}

// BootMAC returns the MAC of the NIC the firmware booted from, as PXELINUX
// and iPXE ("BOOTIF=01-${netX/mac:hexhyp}") pass it on the kernel command
// line (params, split), or nil.
func BootMAC(params []string) net.HardwareAddr {
	for _, p := range params {
		v, ok := strings.CutPrefix(p, "BOOTIF=")
		if !ok {
			continue
		}
		// "01-" is the ARP hardware type (Ethernet).
		v = strings.TrimPrefix(strings.ToLower(v), "01-")
		if mac, err := net.ParseMAC(strings.ReplaceAll(v, "-", ":")); err == nil && len(mac) == 6 {
			return mac
		}
	}
	return nil
}

// ListNICs returns the Ethernet interfaces in sysfs, sorted by name.
func ListNICs() ([]NIC, error) {
	entries, err := os.ReadDir(SysClassNet)
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var out []NIC
	for _, e := range entries {
		dir := filepath.Join(SysClassNet, e.Name())
		// type 1 is ARPHRD_ETHER; loopback (772) and others are skipped.
		if t, _ := os.ReadFile(filepath.Join(dir, "type")); strings.TrimSpace(string(t)) != "1" {
			continue
		}
		ifi, err := net.InterfaceByName(e.Name())
		if err != nil || len(ifi.HardwareAddr) != 6 {
			continue
		}
		c, _ := os.ReadFile(filepath.Join(dir, "carrier"))
		out = append(out, NIC{Name: e.Name(), Index: ifi.Index, MAC: ifi.HardwareAddr, Carrier: strings.TrimSpace(string(c)) == "1"})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// OrderNICs puts the boot NIC first when it is known; without it, NICs with
// a link come first.
func OrderNICs(nics []NIC, boot net.HardwareAddr) []NIC {
	out := append([]NIC(nil), nics...)
	rank := func(n NIC) int {
		switch {
		case boot != nil && bytes.Equal(n.MAC, boot):
			return 0
		case n.Carrier:
			return 1
		}
		return 2
	}
	sort.SliceStable(out, func(a, b int) bool { return rank(out[a]) < rank(out[b]) })
	return out
}

// Setup brings up every NIC and configures one: the boot NIC if known
// (BootMAC; nil if not), else every NIC with a link, in turn, until one
// gets a usable configuration: an address of the family need names (the
// server's URL, FamilyOf). logf receives progress lines.
func Setup(boot net.HardwareAddr, need Family, logf func(format string, a ...any)) error {
	deadline := time.Now().Add(NICWait)
	var nics []NIC
	for {
		var err error
		if nics, err = ListNICs(); err != nil {
			return err
		}
		if len(nics) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(nics) == 0 {
		return fmt.Errorf("network: no Ethernet interface appeared within %v (is the NIC's driver in the initrd's module list?)", NICWait)
	}
	for _, n := range nics {
		if err := netlink.LinkUp(n.Index); err != nil {
			logf("WARNING: %s: %v", n.Name, err)
		}
	}
	if boot != nil {
		logf("network: boot NIC %s (BOOTIF)", boot)
	}
	// Wait for carrier: on the boot NIC if known, else on any NIC.
	carrierDeadline := time.Now().Add(CarrierWait)
	for {
		nics, _ = ListNICs()
		ok := false
		for _, n := range nics {
			if n.Carrier && (boot == nil || bytes.Equal(n.MAC, boot)) {
				ok = true
			}
		}
		if ok || time.Now().After(carrierDeadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	nics = OrderNICs(nics, boot)
	var names []string
	for _, n := range nics {
		names = append(names, fmt.Sprintf("%s(%s link=%v)", n.Name, n.MAC, n.Carrier))
	}
	logf("network: interfaces %s", strings.Join(names, " "))

	var errs []string
	for round := 1; round <= Rounds; round++ {
		for _, n := range nics {
			if boot != nil && !bytes.Equal(n.MAC, boot) && round == 1 {
				continue // the boot NIC alone gets the first round
			}
			logf("network: DHCPv4, SLAAC and DHCPv6 on %s (attempt %d of %d)", n.Name, round, Rounds)
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), AttemptTimeout)
			cfgs, err := Acquire(ctx, n, need, logf)
			cancel()
			if err != nil {
				logf("network: %s: %v", n.Name, err)
				errs = append(errs, fmt.Sprintf("%s: %v", n.Name, err))
				continue
			}
			if err := Apply(n, cfgs...); err != nil {
				return err
			}
			for _, c := range cfgs {
				logf("network: %s configured after %v by %s", n.Name, time.Since(start).Round(time.Millisecond), c)
			}
			return nil
		}
	}
	return fmt.Errorf("network: no usable address on any interface after %d rounds (%s)", Rounds, strings.Join(errs, "; "))
}

// Family is the address family the init must reach its server over.
type Family int

const (
	AnyFamily Family = iota // a host name: either family may reach it
	IPv4                    // an IPv4 literal
	IPv6                    // an IPv6 literal
)

func (f Family) String() string {
	return [...]string{"any", "IPv4", "IPv6"}[f]
}

// FamilyOf is the family a URL's host needs: a literal address names one,
// anything else (a host name, a URL that does not parse) takes either.
func FamilyOf(rawURL string) Family {
	u, err := url.Parse(rawURL)
	if err != nil {
		return AnyFamily
	}
	a, err := netip.ParseAddr(u.Hostname())
	switch {
	case err != nil:
		return AnyFamily
	case a.Unmap().Is4():
		return IPv4
	default:
		return IPv6
	}
}

// metBy reports whether cfgs give the family an address.
func (f Family) metBy(cfgs []Config) bool {
	for _, c := range cfgs {
		for _, p := range c.Addrs {
			if f == AnyFamily || (f == IPv4) == p.Addr().Unmap().Is4() {
				return true
			}
		}
	}
	return false
}

// Acquire runs DHCPv4 and IPv6 autoconfiguration on n in parallel and
// returns the first usable configuration of the family need names, and the
// other family's if it follows within Grace; then the other is cancelled.
// A configuration of the other family alone is not enough: under load
// SLAAC may answer long before DHCPv4, and an IPv4 server is then
// unreachable.
func Acquire(ctx context.Context, n NIC, need Family, logf func(format string, a ...any)) ([]Config, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		cfg Config
		err error
	}
	results := make(chan result, 2)
	go func() {
		cfg, err := viaDHCPv4(ctx, n)
		results <- result{cfg, err}
	}()
	go func() {
		cfg, err := viaIPv6(ctx, n, logf)
		results <- result{cfg, err}
	}()
	var (
		got  []Config
		errs []error
	)
	for range 2 {
		var r result
		if need.metBy(got) {
			select {
			case r = <-results:
			case <-time.After(Grace):
				return got, nil
			}
		} else {
			r = <-results
		}
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		got = append(got, r.cfg)
	}
	if need.metBy(got) {
		return got, nil
	}
	if len(got) > 0 {
		errs = append(errs, fmt.Errorf("%s gave no %s address, which the server's URL needs", got[0].Method, need))
	}
	return nil, errors.Join(errs...)
}

func viaDHCPv4(ctx context.Context, n NIC) (Config, error) {
	l, err := dhcp4.Exchange(ctx, n.Name, n.Index, n.MAC)
	if err != nil {
		return Config{}, fmt.Errorf("DHCPv4: %w", err)
	}
	return Config{Method: "DHCPv4", Addrs: []netip.Prefix{l.Addr}, Routes: l.Routes(), DNS: l.DNS, MTU: uint32(l.MTU)}, nil
}

// viaIPv6 solicits a router advertisement; its prefix gives a SLAAC
// address, or, when it sets the managed flag, DHCPv6 does. The default
// route and the on-link prefixes come from the advertisement either way.
func viaIPv6(ctx context.Context, n NIC, logf func(format string, a ...any)) (Config, error) {
	ra, err := slaac.Solicit(ctx, n.Name, n.Index, n.MAC)
	if err != nil {
		return Config{}, fmt.Errorf("IPv6: %w", err)
	}
	cfg := Config{DNS: ra.RDNSS}
	if ra.MTU >= 1280 {
		cfg.MTU = ra.MTU
	}
	if ra.RouterLifetime > 0 {
		cfg.Routes = append(cfg.Routes, netlink.Route{Dst: netip.PrefixFrom(netip.IPv6Unspecified(), 0), Gateway: ra.Router})
	}
	addr, err := ra.Address(n.MAC)
	switch {
	case err == nil:
		cfg.Method = "SLAAC"
		cfg.Addrs = []netip.Prefix{addr}
	case ra.Managed:
		logf("network: %s: router %s asks for DHCPv6", n.Name, ra.Router)
		l, err := dhcp6.Exchange(ctx, n.Name, n.Index, n.MAC)
		if err != nil {
			return Config{}, fmt.Errorf("DHCPv6: %w", err)
		}
		cfg.Method = "DHCPv6"
		cfg.Addrs = []netip.Prefix{netip.PrefixFrom(l.Addr, 128)}
		for _, d := range cfg.DNS { // RDNSS often repeats option 23
			if !slices.Contains(l.DNS, d) {
				l.DNS = append(l.DNS, d)
			}
		}
		cfg.DNS = l.DNS
	default:
		return Config{}, fmt.Errorf("IPv6: router %s offers neither an autonomous /64 prefix nor DHCPv6", ra.Router)
	}
	for _, p := range ra.OnLink() {
		if p != cfg.Addrs[0].Masked() { // the kernel routes an address's own prefix
			cfg.Routes = append(cfg.Routes, netlink.Route{Dst: p})
		}
	}
	return cfg, nil
}

// Apply configures n: MTU, addresses, routes of every configuration, and
// resolv.conf with all their DNS servers, the first configuration's first.
func Apply(n NIC, cfgs ...Config) error {
	// Both families share the link: the smallest MTU asked for.
	var mtu uint32
	for _, c := range cfgs {
		if c.MTU > 0 && (mtu == 0 || c.MTU < mtu) {
			mtu = c.MTU
		}
	}
	if mtu > 0 {
		if err := netlink.SetMTU(n.Index, mtu); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	var methods []string
	var dns []netip.Addr
	for _, c := range cfgs {
		if err := apply(n, c); err != nil {
			return err
		}
		methods = append(methods, c.Method)
		for _, d := range c.DNS {
			if !slices.Contains(dns, d) {
				dns = append(dns, d)
			}
		}
	}
	var rc strings.Builder
	rc.WriteString("# written by osb-init from " + strings.Join(methods, ", ") + "\n")
	for _, d := range dns {
		fmt.Fprintf(&rc, "nameserver %s\n", d)
	}
	if err := os.MkdirAll(filepath.Dir(ResolvConf), 0o755); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := os.WriteFile(ResolvConf, []byte(rc.String()), 0o644); err != nil {
		return fmt.Errorf("network: write %s: %w", ResolvConf, err)
	}
	return nil
}

func apply(n NIC, c Config) error {
	for _, a := range c.Addrs {
		var flags uint8
		if a.Addr().Is6() {
			flags = netlink.AddrNoDAD
		}
		if err := netlink.AddAddr(n.Index, a, flags); err != nil {
			return fmt.Errorf("network: %s: %w", n.Name, err)
		}
	}
	for _, r := range c.Routes {
		if err := netlink.AddRoute(n.Index, r); err != nil {
			return fmt.Errorf("network: %s: %w", n.Name, err)
		}
	}
	return nil
}
