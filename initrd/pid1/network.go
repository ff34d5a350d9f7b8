package pid1

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Network timing. NIC drivers probe asynchronously and links take seconds to
// negotiate, so the init waits for them; DHCP retransmits with exponential
// backoff as RFC 2131 suggests.
var (
	NICWait       = 20 * time.Second // for the first NIC to appear
	CarrierWait   = 10 * time.Second // for links to come up
	dhcpTimeouts  = []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second}
	dhcpRounds    = 3 // passes over all candidate NICs
	resolvConf    = "/etc/resolv.conf"
	sysClassNet   = "/sys/class/net"
	broadcastAddr = netip.AddrFrom4([4]byte{255, 255, 255, 255})
)

// nic is a network interface the init may configure.
type nic struct {
	name    string
	index   int
	mac     net.HardwareAddr
	carrier bool
}

// bootMAC returns the MAC of the NIC the firmware booted from, as PXELINUX
// and iPXE ("BOOTIF=01-${netX/mac:hexhyp}") pass it, or nil.
func bootMAC(cmdline string) net.HardwareAddr {
	for _, p := range SplitCmdline(cmdline) {
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

// listNICs returns the Ethernet interfaces in sysfs, sorted by name.
func listNICs() ([]nic, error) {
	entries, err := os.ReadDir(sysClassNet)
	if err != nil {
		return nil, fmt.Errorf("list network interfaces: %w", err)
	}
	var out []nic
	for _, e := range entries {
		dir := filepath.Join(sysClassNet, e.Name())
		// type 1 is ARPHRD_ETHER; loopback (772) and others are skipped.
		if t, _ := os.ReadFile(filepath.Join(dir, "type")); strings.TrimSpace(string(t)) != "1" {
			continue
		}
		ifi, err := net.InterfaceByName(e.Name())
		if err != nil || len(ifi.HardwareAddr) != 6 {
			continue
		}
		c, _ := os.ReadFile(filepath.Join(dir, "carrier"))
		out = append(out, nic{name: e.Name(), index: ifi.Index, mac: ifi.HardwareAddr, carrier: strings.TrimSpace(string(c)) == "1"})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return out, nil
}

// orderNICs puts the boot NIC first when it is known; without it, NICs with
// a link come first.
func orderNICs(nics []nic, boot net.HardwareAddr) []nic {
	out := append([]nic(nil), nics...)
	rank := func(n nic) int {
		switch {
		case boot != nil && bytes.Equal(n.mac, boot):
			return 0
		case n.carrier:
			return 1
		}
		return 2
	}
	sort.SliceStable(out, func(a, b int) bool { return rank(out[a]) < rank(out[b]) })
	return out
}

// setupNetwork brings up a NIC with DHCP: the boot NIC if the command line
// names it, else every NIC with a link, in turn, until one gets a lease.
func (i *initProcess) setupNetwork(cmdline string) error {
	boot := bootMAC(cmdline)
	deadline := time.Now().Add(NICWait)
	var nics []nic
	for {
		var err error
		if nics, err = listNICs(); err != nil {
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
		if err := netlinkDo("bring up "+n.name, func(seq uint32) []byte { return linkUpMsg(seq, n.index) }); err != nil {
			i.logf("WARNING: %v", err)
		}
	}
	if boot != nil {
		i.logf("network: boot NIC %s (BOOTIF)", boot)
	}
	// Wait for carrier: on the boot NIC if known, else on any NIC.
	carrierDeadline := time.Now().Add(CarrierWait)
	for {
		nics, _ = listNICs()
		ok := false
		for _, n := range nics {
			if n.carrier && (boot == nil || bytes.Equal(n.mac, boot)) {
				ok = true
			}
		}
		if ok || time.Now().After(carrierDeadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	nics = orderNICs(nics, boot)
	var names []string
	for _, n := range nics {
		names = append(names, fmt.Sprintf("%s(%s link=%v)", n.name, n.mac, n.carrier))
	}
	i.logf("network: interfaces %s", strings.Join(names, " "))

	var errs []string
	for round := 1; round <= dhcpRounds; round++ {
		for _, n := range nics {
			if boot != nil && !bytes.Equal(n.mac, boot) && round == 1 {
				continue // the boot NIC alone gets the first round
			}
			i.logf("network: DHCP on %s (attempt %d of %d)", n.name, round, dhcpRounds)
			lease, err := dhcpExchange(n)
			if err != nil {
				i.logf("network: %s: %v", n.name, err)
				errs = append(errs, fmt.Sprintf("%s: %v", n.name, err))
				continue
			}
			if err := configure(n, lease); err != nil {
				return err
			}
			i.logf("network: %s configured: %s", n.name, lease)
			return nil
		}
	}
	return fmt.Errorf("network: no DHCP lease on any interface after %d rounds (%s)", dhcpRounds, strings.Join(errs, "; "))
}

// configure applies a lease: address, default route, resolv.conf.
func configure(n nic, l dhcpLease) error {
	if err := netlinkDo("add address "+l.Addr.String()+" to "+n.name, func(seq uint32) []byte { return addAddrMsg(seq, n.index, l.Addr) }); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if l.Router.IsValid() {
		if err := netlinkDo("add default route via "+l.Router.String(), func(seq uint32) []byte { return addDefaultRouteMsg(seq, n.index, l.Router) }); err != nil {
			return fmt.Errorf("network: %w", err)
		}
	}
	var rc strings.Builder
	rc.WriteString("# written by osb-init from DHCP\n")
	for _, d := range l.DNS {
		fmt.Fprintf(&rc, "nameserver %s\n", d)
	}
	if err := os.MkdirAll(filepath.Dir(resolvConf), 0o755); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := os.WriteFile(resolvConf, []byte(rc.String()), 0o644); err != nil {
		return fmt.Errorf("network: write %s: %w", resolvConf, err)
	}
	return nil
}

// packetConn sends and receives IPv4 packets on one interface, below the
// IP stack.
type packetConn struct {
	fd    int
	index int
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openPacketConn(n nic) (*packetConn, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
	if err != nil {
		return nil, fmt.Errorf("packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: n.index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind packet socket to %s: %w", n.name, err)
	}
	return &packetConn{fd: fd, index: n.index}, nil
}

func (c *packetConn) close() { unix.Close(c.fd) }

func (c *packetConn) sendBroadcast(payload []byte) error {
	pkt := encodeUDP4(netip.IPv4Unspecified(), broadcastAddr, dhcpClientPort, dhcpServerPort, payload)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: c.index, Halen: 6,
		Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	return unix.Sendto(c.fd, pkt, 0, to)
}

// receive returns the next DHCP reply for xid before deadline.
func (c *packetConn) receive(xid uint32, mac net.HardwareAddr, deadline time.Time) (*dhcpMessage, error) {
	buf := make([]byte, 2048)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, errTimeout
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
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

var errTimeout = errors.New("timed out")

// dhcpExchange runs DISCOVER/OFFER/REQUEST/ACK on n and returns the lease.
func dhcpExchange(n nic) (dhcpLease, error) {
	c, err := openPacketConn(n)
	if err != nil {
		return dhcpLease{}, err
	}
	defer c.close()
	var x [4]byte
	if _, err := rand.Read(x[:]); err != nil {
		return dhcpLease{}, fmt.Errorf("random transaction id: %w", err)
	}
	xid := binary.BigEndian.Uint32(x[:])
	start := time.Now()
	secs := func() uint16 { return uint16(min(time.Since(start)/time.Second, 0xffff)) }

	// exchange sends msg and waits for a reply of type want, resending with
	// growing timeouts.
	exchange := func(build func() *dhcpMessage, want byte) (*dhcpMessage, error) {
		for _, timeout := range dhcpTimeouts {
			pkt, err := build().encode()
			if err != nil {
				return nil, err
			}
			if err := c.sendBroadcast(pkt); err != nil {
				return nil, fmt.Errorf("send: %w", err)
			}
			deadline := time.Now().Add(timeout)
			for {
				m, err := c.receive(xid, n.mac, deadline)
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
		for _, t := range dhcpTimeouts {
			total += t
		}
		return nil, fmt.Errorf("no DHCP %s within %v", map[byte]string{dhcpOffer: "offer", dhcpAck: "acknowledgement"}[want], total)
	}

	offer, err := exchange(func() *dhcpMessage { return newDiscover(xid, n.mac, secs()) }, dhcpOffer)
	if err != nil {
		return dhcpLease{}, err
	}
	if _, err := offer.lease(); err != nil {
		return dhcpLease{}, err
	}
	ack, err := exchange(func() *dhcpMessage { return newRequest(xid, n.mac, secs(), offer) }, dhcpAck)
	if err != nil {
		return dhcpLease{}, err
	}
	return ack.lease()
}
