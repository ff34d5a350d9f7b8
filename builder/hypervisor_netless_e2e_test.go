package builder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// bootReportDone is the console line osb-boot-report.service (ordered
// after multi-user.target) prints once the target is reached with no
// failed unit. systemd's own "Reached target" line is no proof: systemd
// stops printing status once the serial getty runs on the console.
const bootReportDone = "osb-boot-report: reached multi-user.target; failed units: none"

// hypervisorVM is the QEMU configuration of the hypervisor e2e tests: the
// image's kernel and initrd through OVMF, 2 CPUs, 2 GiB, extra command line
// appended to the image's own.
func hypervisorVM(t *testing.T, out, extraCmdline string) qemu.Config {
	t.Helper()
	cmdline, err := os.ReadFile(filepath.Join(out, "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	return qemu.Config{
		Kernel:    filepath.Join(out, "vmlinuz"),
		Initrd:    filepath.Join(out, "initrd.img"),
		Append:    strings.TrimSpace(strings.TrimSpace(string(cmdline)) + " " + extraCmdline),
		UEFI:      true,
		MemoryMB:  2048,
		CPUs:      2,
		SerialLog: os.Getenv("OSB_HYPERVISOR_SERIAL_LOG"),
	}
}

// waitAll waits for each console line in turn.
func waitAll(t *testing.T, ctx context.Context, vm *qemu.VM, lines ...string) {
	t.Helper()
	for _, want := range lines {
		if _, err := vm.WaitFor(ctx, want); err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
	}
}

// TestHypervisorBootNoNIC boots the hypervisor image with no network card
// and no ignition config: the node must finish booting (multi-user.target,
// no failed unit) and say on the console what it waits for, instead of
// hanging in "Starting" behind network-online.target or its services'
// waits.
func TestHypervisorBootNoNIC(t *testing.T) {
	t.Parallel()
	out := hypervisorOutput(t)
	buildertest.RequireTools(t, "qemu-system-x86_64")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	vm := qemutest.StartT(t, ctx, hypervisorVM(t, out, "")) // Net nil: -nic none
	waitAll(t, ctx, vm,
		"ignition-apply: no config",
		bootReportDone+"; network: no Ethernet interface",
	)
	t.Logf("multi-user.target after %v", time.Since(start).Round(time.Second))
	// What the node waits for, on the console (from the journal).
	waitAll(t, ctx, vm,
		"libvirt-provider: waiting for configuration: /etc/ironcore/libvirt-provider.env /etc/ironcore/machine-classes.yaml missing",
		"machinepoollet: waiting for configuration: /etc/ironcore/machinepoollet.env /etc/ironcore/machinepoollet/kubeconfig missing",
		"metalnet: waiting for configuration:",
	)
}

// TestHypervisorBootLinkDown boots the hypervisor image with a NIC whose
// cable is out (QMP set_link off before the firmware runs) and a config
// URL on the kernel command line: the node finishes booting and says it
// waits for a link to fetch its config, and libvirt-provider does not
// answer (its /healthz, through a host port forward); once the cable is
// in, ignition fetches and applies the config by itself, libvirt-provider
// is done waiting for its configuration and machinepoollet waits for its
// API server. What the applied config then runs (the provider healthy, the
// autologin drop-in, no failed unit) is TestBootOperatorIPXE's
// checkHypervisorServices on the same kernel + initrd with the same
// ignition config (nodeIgnition), so the test ends here.
func TestHypervisorBootLinkDown(t *testing.T) {
	t.Parallel()
	out := hypervisorOutput(t)
	buildertest.RequireTools(t, "qemu-system-x86_64")
	url := serveNode(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	healthPort := l.Addr().(*net.TCPAddr).Port
	l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cfg := hypervisorVM(t, out, "ignition.config.url="+url)
	cfg.Net = &qemu.NetConfig{HostForwards: []string{fmt.Sprintf("tcp:127.0.0.1:%d-:8181", healthPort)}}
	cfg.Monitor, cfg.Paused = true, true
	vm := qemutest.StartT(t, ctx, cfg)
	mon, err := vm.Monitor(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if err := mon.SetLink(ctx, qemu.NICID, false); err != nil {
		t.Fatal(err)
	}
	if err := mon.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitAll(t, ctx, vm,
		"ignition-apply: waiting for a network link (",
		bootReportDone+"; network: ",
	)
	t.Logf("multi-user.target after %v with the link down", time.Since(start).Round(time.Second))
	if line := consoleLine(vm, bootReportDone); !strings.Contains(line, " no-carrier") {
		t.Errorf("the boot report does not say the link has no carrier: %q", line)
	}
	health := "http://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(healthPort)) + "/healthz"
	if code := httpStatus(health); code == http.StatusOK {
		t.Fatalf("libvirt-provider answers before the node has its config")
	}

	if err := mon.SetLink(ctx, qemu.NICID, true); err != nil {
		t.Fatal(err)
	}
	linkUp := time.Now()
	waitAll(t, ctx, vm,
		"ignition-apply: done waiting for a network link",
		"ignition-apply: applied",
		"libvirt-provider: done waiting for configuration",
		"machinepoollet: waiting for API server at https://10.0.2.2:",
	)
	t.Logf("config applied and services configured %v after the link came up", time.Since(linkUp).Round(time.Second))
}

// consoleLine is the first console line holding s.
func consoleLine(vm *qemu.VM, s string) string {
	for _, line := range strings.Split(qemu.StripANSI(vm.Console()), "\n") {
		if strings.Contains(line, s) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}

// TestAwaitConfig runs the IronCore units' configuration wait on the host:
// with its files present it runs the unit's program at once; without them
// it keeps running (the unit stays active), says what it waits for, and
// exits 75 (the units' restart-to-reload code) once they appear; as an
// ExecCondition= (no program) it skips the unit.
func TestAwaitConfig(t *testing.T) {
	script := filepath.Join(buildertest.RepoRoot(t), "recipes/layers/files/ironcore/await-config")
	dir := t.TempDir()
	env, classes := filepath.Join(dir, "p.env"), filepath.Join(dir, "classes.yaml")

	// Missing files, a program to run: wait, then exit 75.
	cmd := exec.Command(script, "provider", env, classes, "--", "echo", "started")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("await-config ended while its configuration is missing: %v\n%s", err, stderr.String())
	case <-time.After(3 * time.Second):
	}
	testutil.WriteFile(t, dir, "p.env", []byte("X=1\n"))
	testutil.WriteFile(t, dir, "classes.yaml", []byte("[]\n"))
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 75 {
			t.Errorf("await-config after the configuration came = %v, want exit status 75", err)
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatal("await-config did not notice its configuration")
	}
	for _, want := range []string{
		"provider: waiting for configuration: " + env + " " + classes + " missing",
		"provider: done waiting for configuration: " + env + " " + classes + " present",
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, stderr.String())
		}
	}

	// Files present: the program runs in its place, arguments intact.
	b, err := exec.Command(script, "provider", env, classes, "--", "printf", "%s|", "a b", "--", "c").CombinedOutput()
	if err != nil || string(b) != "a b|--|c|" {
		t.Errorf("await-config with its configuration = %q, %v; want the program's output", b, err)
	}

	// ExecCondition= form: skip (exit 1) and say why.
	b, err = exec.Command(script, "prepare", filepath.Join(dir, "missing.env")).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(b), "prepare: waiting for configuration:") {
		t.Errorf("await-config as a condition = %q, %v; want exit 1 and the reason", b, err)
	}
	if err := exec.Command(script, "prepare", env).Run(); err != nil {
		t.Errorf("await-config as a condition, configured: %v", err)
	}
}

// TestAwaitEndpoint: the peer wait logs what it waits for, then runs the
// program once the peer answers.
func TestAwaitEndpoint(t *testing.T) {
	buildertest.RequireTools(t, "bash")
	script := filepath.Join(buildertest.RepoRoot(t), "recipes/layers/files/ironcore/await-endpoint")
	sock := filepath.Join(t.TempDir(), "peer.sock")
	cmd := exec.Command(script, "poollet", "provider", "unix:"+sock, "--", "echo", "started")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	time.Sleep(3 * time.Second)
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("await-endpoint: %v", err)
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		t.Fatal("await-endpoint did not notice its peer")
	}
	for _, want := range []string{"poollet: waiting for provider at " + sock, "poollet: done waiting for provider", "started"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// httpStatus is url's HTTP status code, 0 when it does not answer.
func httpStatus(url string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
