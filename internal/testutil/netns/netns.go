// Package netns gives network tests a private network namespace: a veth
// pair between a "server" namespace (dnsmasq, HTTP) and the test's own, so
// real DHCPv4/DHCPv6/router-advertisement servers can talk to the init's
// clients without touching the host's network. Tests need root and
// iproute2; without them they skip, or fail in CI (testutil.Missing).
//
// A test that must run whole inside a namespace (its sockets are opened by
// many goroutines, on any OS thread) re-executes itself there: RunInside.
package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// childEnv marks the re-executed test process running inside a namespace.
const childEnv = "OSB_NETNS_CHILD"

// NS is a named network namespace (ip netns), deleted when the test ends.
type NS struct {
	Name string
}

// Require stops the test by the Missing rule unless it runs as root with
// iproute2.
func Require(t testing.TB) {
	t.Helper()
	testutil.RequireTool(t, "ip")
	if os.Geteuid() != 0 {
		testutil.Missing(t, "network namespace tests need root")
	}
}

// New creates a namespace with its loopback up.
func New(t testing.TB) *NS {
	t.Helper()
	Require(t)
	var b [4]byte
	rand.Read(b[:])
	ns := &NS{Name: "osbt-" + hex.EncodeToString(b[:])}
	testutil.Run(t, "ip", "netns", "add", ns.Name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns.Name).Run() })
	ns.Run(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Command is name with args run inside the namespace.
func (ns *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Run runs a command inside the namespace and returns its output; failure
// fails the test.
func (ns *NS) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := ns.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("in %s: %s %s: %v\n%s", ns.Name, name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Veth links two namespaces by a veth pair, a in ns and b in peer, both up.
// The peer end gets MAC 02:00:00:00:00:02 so tests can predict its EUI-64
// address.
func Veth(t testing.TB, ns *NS, a string, peer *NS, b string) {
	t.Helper()
	testutil.Run(t, "ip", "link", "add", a, "netns", ns.Name, "type", "veth", "peer", "name", b, "netns", peer.Name,
		"address", "02:00:00:00:00:02")
	ns.Run(t, "ip", "link", "set", a, "up")
	peer.Run(t, "ip", "link", "set", b, "up")
}

// Inside reports whether this process is the re-executed test inside a
// namespace.
func Inside() bool { return os.Getenv(childEnv) != "" }

// RunInside re-executes the current test (t.Name()) inside ns and fails t
// with the child's output when it fails. The child sees Inside() true.
func RunInside(t *testing.T, ns *NS, env ...string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(self, "-test.run", "^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s inside %s: %v\n%s", t.Name(), ns.Name, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s inside %s did not pass:\n%s", t.Name(), ns.Name, out)
	}
	if testing.Verbose() {
		t.Logf("inside %s:\n%s", ns.Name, out)
	}
	return string(out)
}

// Dnsmasq runs Debian's dnsmasq in ns in the foreground, with no DNS, no
// lease file and no configuration besides args, until the test ends. It
// returns a function giving dnsmasq's log so far, for failure messages.
func (ns *NS) Dnsmasq(t testing.TB, args ...string) func() string {
	t.Helper()
	testutil.RequireTool(t, "dnsmasq")
	var log testutil.SyncBuffer
	cmd := ns.Command("dnsmasq", append([]string{"--keep-in-foreground", "--log-facility=-", "--conf-file=/dev/null",
		"--port=0", "--no-resolv", "--no-hosts", "--leasefile-ro", "--dhcp-authoritative", "--log-dhcp", "--bind-interfaces",
		"--pid-file="}, args...)...)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dnsmasq: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return log.String
}

// DnsmasqClient runs the calling test again as a client on "c0", linked by
// a veth pair to a namespace where dnsmasq serves args on "s0", which has
// the addresses addrs (IPv6 ones without duplicate address detection).
// In the outer run it returns nil once the inner run passed (the caller
// returns); in the inner run it returns c0.
func DnsmasqClient(t *testing.T, addrs []string, args ...string) *net.Interface {
	t.Helper()
	if !Inside() {
		srv, cli := New(t), New(t)
		Veth(t, srv, "s0", cli, "c0")
		for _, a := range addrs {
			ip := []string{"addr", "add", a, "dev", "s0"}
			if strings.Contains(a, ":") {
				ip = append(ip, "nodad")
			}
			srv.Run(t, "ip", ip...)
		}
		log := srv.Dnsmasq(t, append([]string{"--interface=s0"}, args...)...)
		time.Sleep(300 * time.Millisecond) // dnsmasq binds its sockets
		defer func() {
			if t.Failed() {
				t.Logf("dnsmasq:\n%s", log())
			}
		}()
		RunInside(t, cli)
		return nil
	}
	return link(t, "c0")
}

// LoneLink runs the calling test again with "c0" up on a veth pair whose
// other end nothing serves: what a client sees on a network without
// servers. Outer run: nil once the inner run passed; inner run: c0.
func LoneLink(t *testing.T) *net.Interface {
	t.Helper()
	if !Inside() {
		ns := New(t)
		ns.Run(t, "ip", "link", "add", "c0", "type", "veth", "peer", "name", "c1")
		ns.Run(t, "ip", "link", "set", "c0", "up")
		ns.Run(t, "ip", "link", "set", "c1", "up")
		RunInside(t, ns)
		return nil
	}
	return link(t, "c0")
}

// CancelledExchange runs exchange on a LoneLink with a context that ends
// after 500 ms: it must fail (there is no server to answer) and return
// within 2 s, so that a client whose context is cancelled stops at once
// instead of finishing its retransmissions.
func CancelledExchange(t *testing.T, exchange func(ctx context.Context, ifi *net.Interface) error) {
	t.Helper()
	ifi := LoneLink(t)
	if ifi == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := exchange(ctx, ifi); err == nil {
		t.Fatal("an answer without a server")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cancelled exchange took %v", d)
	}
}

func link(t *testing.T, name string) *net.Interface {
	t.Helper()
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return ifi
}
