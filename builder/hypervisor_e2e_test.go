package builder

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	binenc "encoding/binary"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/ignition"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// hypervisorOutput is recipes/hypervisor.yaml's output directory (built
// with --exclude-layer dpservice here).
func hypervisorOutput(t *testing.T) string { return testutil.Output(t, testutil.HypervisorOutputEnv) }

// testSSHKey is a well-formed (throw-away) ed25519 public key line.
func testSSHKey() string {
	pub := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)).Public().(ed25519.PublicKey)
	var b []byte
	for _, part := range [][]byte{[]byte("ssh-ed25519"), pub} {
		b = binenc.BigEndian.AppendUint32(b, uint32(len(part)))
		b = append(b, part...)
	}
	return "ssh-ed25519 " + base64.StdEncoding.EncodeToString(b) + " e2e@os-builder"
}

// e2eNode is the node config the test boots with. Its machinepoollet
// kubeconfig names an API server that does not answer (a closed port on the
// host), so the poollet must wait for it and say so. The serial-getty
// autologin drop-in exists for this test only: it lets the test run
// commands on the console.
func e2eNode(apiServer string) ignition.Node {
	return ignition.Node{
		Hostname:          "hv-e2e",
		SSHAuthorizedKeys: []string{testSSHKey()},
		LibvirtProvider: &ignition.LibvirtProvider{
			MachineClasses: "- apiVersion: compute.ironcore.dev/v1alpha1\n  kind: MachineClass\n  metadata:\n    name: t3-tiny\n  capabilities:\n    cpu: \"1\"\n    memory: 256Mi\n",
			// No apinet here: the isolated plugin needs no API server;
			// TCG: no KVM in the test VM.
			Flags: []string{"--network-interface-plugin-name=isolated", "--preferred-domain-types=qemu"},
		},
		Machinepoollet: &ignition.Machinepoollet{
			Kubeconfig:      "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://" + apiServer + "\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: e2e}\n",
			MachinePoolName: "hv-e2e",
		},
		Dropins: map[string]map[string]string{
			"serial-getty@ttyS0.service": {"10-e2e-autologin.conf": "[Service]\nExecStart=\nExecStart=-/sbin/agetty --autologin root --keep-baud 115200,57600,38400,9600 %I $TERM\n"},
		},
	}
}

// checkHypervisorServices checks on the console of a booted hypervisor
// (e2eNode's config applied) what the image is for: libvirtd is active and
// virsh lists capabilities; libvirt-provider is active and its health and
// metrics endpoints answer; machinepoollet waits for its API server,
// active, with a clear line in its journal and on the console; metalnet,
// unconfigured, says it waits for configuration; no unit failed.
// TestBootOperatorIPXE boots the hypervisor the way IronCore boots it and
// runs these; TestHypervisorBootNoNIC and TestHypervisorBootLinkDown boot
// it from its own command line under UEFI.
func checkHypervisorServices(t *testing.T, ctx context.Context, vm *qemu.VM) {
	t.Helper()
	if _, err := vm.WaitFor(ctx, "machinepoollet: waiting for API server at https://10.0.2.2:"); err != nil { // on the console
		t.Fatalf("waiting for machinepoollet's line: %v", err)
	}
	got := consoleChecks(t, ctx, vm, []consoleCheck{
		{"hostname", "hostname"},
		{"libvirtd", "systemctl is-active libvirtd"},
		{"virsh-guests", "virsh -c qemu:///system capabilities | grep -c '<guest>'"},
		// libvirt-provider probes libvirt at start (slow under TCG): the
		// tries before it listens are quiet, or their curl errors would
		// be read as the result (a loaded machine failed on it).
		{"provider", "for i in $(seq 90); do systemctl is-active -q libvirt-provider && curl -fs -o /dev/null localhost:8181/healthz && break; sleep 2; done; systemctl is-active libvirt-provider"},
		{"provider-health", "curl -fsS -o /dev/null -w '%{http_code}' localhost:8181/healthz"},
		{"provider-metrics", "curl -fsS localhost:8182/metrics | grep -c '^go_goroutines'"},
		{"poollet", "systemctl is-active machinepoollet"},
		{"poollet-log", "journalctl -u machinepoollet --no-pager | grep -c 'machinepoollet: waiting for API server'"},
		{"metalnet-log", "journalctl -u metalnet --no-pager | grep -c 'metalnet: waiting for configuration'"},
		{"files", "grep -c MACHINE_POOL_NAME=.hv-e2e /etc/ironcore/machinepoollet.env; test -s /etc/ironcore/machine-classes.yaml && echo present"},
		// Ignition writes keys to authorized_keys.d/ignition or, as some
		// distro builds do, authorized_keys; sshd reads both here.
		{"ssh-key", "cat /root/.ssh/authorized_keys /root/.ssh/authorized_keys.d/ignition 2>/dev/null | grep -c e2e@os-builder"},
		{"poollet-journal", "journalctl -u machinepoollet --no-pager -n 8"},
		{"failed", "systemctl list-units --failed --no-legend --plain | wc -l"},
		{"failed-units", "systemctl list-units --failed --no-legend --plain | tr '\\n' ' '"},
	})
	want := map[string]func(string) bool{
		"hostname":         eq("hv-e2e"),
		"libvirtd":         eq("active"),
		"virsh-guests":     positive,
		"provider":         eq("active"),
		"provider-health":  eq("200"),
		"provider-metrics": positive,
		"poollet":          eq("active"), // waiting for the API server, and says so
		"poollet-log":      positive,
		"metalnet-log":     positive,
		"files":            eq("1 present"),
		"ssh-key":          positive,
		"failed":           eq("0"),
	}
	for name, ok := range want {
		if !ok(got[name]) {
			t.Errorf("%s = %q", name, got[name])
		}
	}
	if t.Failed() {
		t.Logf("failed units: %s\nconsole tail:\n%s", got["failed-units"], vm.Tail(120))
	}
}

// serveNode serves e2eNode's config over HTTP to the test's VMs and
// returns its URL as the guest sees it (QEMU's user network: the host is
// 10.0.2.2). The machinepoollet API server is a host port nothing listens on.
func serveNode(t *testing.T) string {
	t.Helper()
	cfg := nodeIgnition(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/node.ign" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(cfg)
	})}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(hl) }()
	t.Cleanup(func() { srv.Close() })
	return fmt.Sprintf("http://10.0.2.2:%d/node.ign", hl.Addr().(*net.TCPAddr).Port)
}

// nodeIgnition is e2eNode's ignition config, validated, with a
// machinepoollet API server at a host port nothing listens on.
func nodeIgnition(t *testing.T) []byte {
	t.Helper()
	_, apiPort, err := net.SplitHostPort(testutil.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := ignition.Generate(e2eNode("10.0.2.2:" + apiPort))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ignition.Validate(cfg); err != nil {
		t.Fatalf("the test's node config does not validate: %v", err)
	}
	return cfg
}

// consoleCheck is a shell command run on the VM's autologin console; its
// output, newlines folded, is the check's value.
type consoleCheck struct{ name, cmd string }

// consoleChecks runs checks one after the other on the console and returns
// their values by name.
func consoleChecks(t *testing.T, ctx context.Context, vm *qemu.VM, checks []consoleCheck) map[string]string {
	t.Helper()
	// Each check prints "R:<name>=<value>"; the format string keeps the
	// typed command (echoed by the tty) from matching.
	for _, c := range checks {
		// The value ends with "=E:<name>" so that the next command is typed
		// only after the whole line was printed.
		line := fmt.Sprintf("printf 'R:%%s=%%s=E:%%s\\n' %s \"$( (%s) 2>&1 | tr '\\n' ' ' | sed 's/ *$//')\" %s\n", c.name, c.cmd, c.name)
		if err := vm.SendConsole(line); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.WaitFor(ctx, "=E:"+c.name); err != nil {
			t.Fatalf("check %s: %v", c.name, err)
		}
	}
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`R:([a-z-]+)=(.*?)=E:([a-z-]+)`).FindAllStringSubmatch(qemu.StripANSI(vm.Console()), -1) {
		got[m[1]] = strings.TrimSpace(m[2])
	}
	t.Logf("console results: %q", got)
	return got
}

func eq(want string) func(string) bool { return func(s string) bool { return s == want } }

func positive(s string) bool {
	var n int
	_, err := fmt.Sscanf(s, "%d", &n)
	return err == nil && n > 0
}
