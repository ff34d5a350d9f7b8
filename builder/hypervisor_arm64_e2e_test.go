package builder

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/ignition"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// hypervisorARM64OutputEnv names the output of
// `builder build recipes/hypervisor.yaml --arch arm64 --exclude-layer dpservice`.
// Opt-in, not set by make test: on an amd64 host its cold build runs the
// maintainer scripts of the whole stack under qemu-user and its boot runs
// under TCG, together more than make test's budget (docs/hypervisor.md).
const hypervisorARM64OutputEnv = "OSB_HYPERVISOR_ARM64_OUTPUT"

// archNode is e2eNode for a node of arch. On arm64 the autologin drop-in
// is the PL011 console's getty (ttyAMA0), and libvirt-provider prefers the
// virt machine type (its default, pc-q35, is x86's only).
func archNode(apiServer, arch string) ignition.Node {
	n := e2eNode(apiServer)
	if arch != "arm64" {
		return n
	}
	n.Dropins = map[string]map[string]string{}
	for unit, files := range e2eNode(apiServer).Dropins {
		n.Dropins[strings.Replace(unit, "@ttyS0.", "@ttyAMA0.", 1)] = files
	}
	lp := *n.LibvirtProvider
	lp.Flags = append(append([]string{}, lp.Flags...), "--preferred-machine-types=virt")
	n.LibvirtProvider = &lp
	return n
}

// ignitionDrive is a FAT file system labelled "ignition" holding config.ign:
// the node config of a disk boot, whose command line (the UKI's) takes no
// ignition.config.url (docs/hypervisor.md, "Node configuration").
func ignitionDrive(t *testing.T, cfg []byte) string {
	t.Helper()
	dir := t.TempDir()
	ign := filepath.Join(dir, "config.ign")
	if err := os.WriteFile(ign, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "ignition.img")
	ctx := context.Background()
	if err := command.Run(ctx, "mkfs.vfat", "-C", "-n", "ignition", "-i", "0513b00d", img, "2048"); err != nil {
		t.Fatal(err)
	}
	if err := command.Run(ctx, "mcopy", "-i", img, ign, "::config.ign"); err != nil {
		t.Fatal(err)
	}
	return img
}

// TestHypervisorARM64Disk boots the arm64 hypervisor's disk.raw as built
// (a same-size copy) in qemu-system-aarch64 (virt, TCG, AAVMF) with its
// node config on a drive labelled ignition, and checks what
// TestBootOperatorIPXE checks on amd64 (checkHypervisorServices): libvirtd
// active with guests in virsh capabilities, libvirt-provider healthy,
// machinepoollet and metalnet waiting and saying so, no failed unit.
func TestHypervisorARM64Disk(t *testing.T) {
	t.Parallel()
	out := os.Getenv(hypervisorARM64OutputEnv)
	if out == "" {
		t.Skipf("%s unset: build the arm64 hypervisor and set it (docs/hypervisor.md, arm64)", hypervisorARM64OutputEnv)
	}
	bootHypervisorDisk(t, out, "arm64", archNodeIgnition(t, archNode(closedAPIServer(t), "arm64")))
}

// bootHypervisorDisk boots out's disk.raw (the hypervisor built for arch)
// with the node config ign on an ignition drive and a NIC, to multi-user
// with no failed unit, then runs checkHypervisorServices.
func bootHypervisorDisk(t *testing.T, out, arch string, ign []byte) {
	t.Helper()
	m, err := osimage.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	if m.Recipe != "hypervisor" || m.Architecture != arch {
		t.Fatalf("%s is recipe %s for %s, want hypervisor for %s", out, m.Recipe, m.Architecture, arch)
	}
	cfg := qemu.Config{Arch: arch}
	buildertest.RequireTools(t, cfg.Binary(), "mkfs.vfat", "mcopy")
	disk := copyDiskFrom(t, out, 0)
	drive := ignitionDrive(t, ign)

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	start := time.Now()
	cfg.UEFI = true
	cfg.Disks = []string{disk, drive}
	cfg.BootFrom = qemu.BootFromDisk
	cfg.MemoryMB, cfg.CPUs = 3072, 2
	cfg.Net = &qemu.NetConfig{NoROM: true} // the firmware drives virtio-net itself
	cfg.SerialLog = os.Getenv("OSB_HYPERVISOR_SERIAL_LOG")
	vm := qemutest.StartT(t, ctx, cfg)
	waitAll(t, ctx, vm,
		"root=partlabel:osb-root",
		"persist: data partition /dev/vda3 mounted",
		"ignition-apply: config from drive /dev/vdb: config.ign",
		bootReportDone,
	)
	t.Logf("%s hypervisor: disk.raw to multi-user.target (no failed unit) in %v", arch, time.Since(start).Round(time.Second))
	checkHypervisorServices(t, ctx, vm)
	t.Logf("%s hypervisor: all checks passed %v after power-on", arch, time.Since(start).Round(time.Second))
}

// archNodeIgnition is node's ignition config, validated.
func archNodeIgnition(t *testing.T, node ignition.Node) []byte {
	t.Helper()
	cfg, err := ignition.Generate(node)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ignition.Validate(cfg); err != nil {
		t.Fatalf("the test's node config does not validate: %v", err)
	}
	return cfg
}

// closedAPIServer is a host port nothing listens on, as the guest sees it
// (QEMU's user network: the host is 10.0.2.2).
func closedAPIServer(t *testing.T) string {
	t.Helper()
	_, port, err := net.SplitHostPort(testutil.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	return "10.0.2.2:" + port
}

// TestHypervisorRecipeArchitectures: recipes/hypervisor.yaml builds for
// amd64 and arm64 with what docs/hypervisor.md ("arm64") says differs:
// each architecture's kernel, QEMU and guest firmware and serial console,
// none of the other's; and the doc names the opt-in boot's variable.
func TestHypervisorRecipeArchitectures(t *testing.T) {
	r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(t), "recipes/hypervisor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(filepath.Join(buildertest.RepoRoot(t), "docs/hypervisor.md"))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Architectures(); !slices.Equal(got, []string{"amd64", "arm64"}) {
		t.Fatalf("architectures = %v, want [amd64 arm64]", got)
	}
	for _, tc := range []struct {
		arch, console string
		own, other    []string
	}{
		{"amd64", "console=ttyS0,115200", []string{"linux-image-amd64", "qemu-system-x86", "ovmf"}, []string{"linux-image-arm64", "qemu-system-arm", "qemu-efi-aarch64"}},
		{"arm64", "console=ttyAMA0,115200", []string{"linux-image-arm64", "qemu-system-arm", "qemu-efi-aarch64"}, []string{"linux-image-amd64", "qemu-system-x86", "ovmf"}},
	} {
		ra, err := r.ForArchitecture(tc.arch)
		if err != nil {
			t.Fatal(err)
		}
		pkgs := ra.Packages()
		for _, p := range tc.own {
			if !slices.Contains(pkgs, p) {
				t.Errorf("%s: package %s missing", tc.arch, p)
			}
			if !strings.Contains(string(doc), "`"+p+"`") {
				t.Errorf("docs/hypervisor.md does not name %s's package `%s`", tc.arch, p)
			}
		}
		for _, p := range tc.other {
			if slices.Contains(pkgs, p) {
				t.Errorf("%s: has the other architecture's package %s", tc.arch, p)
			}
		}
		if words := strings.Fields(ra.Cmdline()); len(words) == 0 || words[0] != tc.console {
			t.Errorf("%s: cmdline %q does not start with %s", tc.arch, ra.Cmdline(), tc.console)
		}
		if !strings.Contains(string(doc), "`"+tc.console+"`") {
			t.Errorf("docs/hypervisor.md does not name %s's `%s`", tc.arch, tc.console)
		}
	}
	for _, s := range []string{hypervisorARM64OutputEnv, "TestHypervisorARM64Disk", "--preferred-machine-types=virt"} {
		if !strings.Contains(string(doc), s) {
			t.Errorf("docs/hypervisor.md does not mention %s", s)
		}
	}
}
