package builder

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
)

// The arm64 image of recipes/test-multiarch.yaml, built on this amd64 host
// by `make test-image` (out/test-arm64), boots in qemu-system-aarch64:
// the virt machine, the max CPU, AAVMF, under TCG. A boot takes minutes,
// so make test boots two artifacts side by side (kernel + initrd until
// the init has its root, disk.raw to multi-user); OSB_ARM64_BOOTS=all adds
// the UKI on an ESP and the ISO.
const (
	arm64OutputEnv = "OSB_TEST_ARM64_OUTPUT"
	arm64BootsEnv  = "OSB_ARM64_BOOTS"
)

func arm64Output(t *testing.T) string {
	out := testutil.Output(t, arm64OutputEnv)
	raw, err := os.ReadFile(filepath.Join(out, osimage.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m osimage.BuildManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if m.Architecture != "arm64" {
		t.Fatalf("%s=%s is a %s build", arm64OutputEnv, out, m.Architecture)
	}
	return out
}

// allARM64Boots stops the test unless OSB_ARM64_BOOTS=all.
func allARM64Boots(t *testing.T) {
	if os.Getenv(arm64BootsEnv) != "all" {
		t.Skipf("%s=all boots this arm64 artifact too (minutes under TCG)", arm64BootsEnv)
	}
}

// bootARM64 boots cfg as an arm64 guest to depth and logs how long it took.
func bootARM64(t *testing.T, cfg qemu.Config, depth bootDepth, extra ...string) *qemu.VM {
	t.Helper()
	cfg.Arch = "arm64"
	began := time.Now()
	vm := bootAndExpect(t, cfg, depth, extra...)
	t.Logf("arm64 boot to %v: %v", depth, time.Since(began).Round(time.Second))
	if strings.Contains(vm.Console(), "FAILED") {
		t.Errorf("a unit failed:\n%s", vm.Tail(80))
	}
	return vm
}

// TestBootARM64KernelInitrd: the arm64 kernel and live initrd (arm64 init,
// arm64 modules, the root layers inside) boot on AAVMF until the init has
// its root from memory. Multi-user of the same bytes is TestBootARM64Disk's:
// checkLiveInitrdMatchesDisk proves that the disk's UKI carries this kernel
// and this initrd's init, and its osb-root these root layers; memory mode's
// overlay is the same Go code as amd64's, which TestBootLiveKernelInitrd
// takes to multi-user.
func TestBootARM64KernelInitrd(t *testing.T) {
	t.Parallel()
	out := arm64Output(t)
	checkLiveInitrdMatchesDisk(t, out, "BOOTAA64.EFI")
	cmdline, err := os.ReadFile(filepath.Join(out, "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	bootARM64(t, qemu.Config{
		Kernel: filepath.Join(out, "vmlinuz"),
		Initrd: filepath.Join(out, "initrd.img"),
		Append: strings.TrimSpace(string(cmdline)),
	}, toRootReady, "osb-init: starting: mode=memory root=initrd")
}

// TestBootARM64Disk: disk.raw as built (EFI/BOOT/BOOTAA64.EFI on the ESP,
// the arm64 root partition type) boots from the disk.
func TestBootARM64Disk(t *testing.T) {
	t.Parallel()
	out := arm64Output(t)
	disk := copyDiskFrom(t, out, 0)
	bootARM64(t, qemu.Config{Disks: []string{disk}}, toMultiUser, "root=partlabel:osb-root", "persist: data partition /dev/vda3 mounted")
}

// TestBootARM64UKIFromESP: uki.efi (linuxaa64.efi.stub) as the removable
// media boot file of an ESP.
func TestBootARM64UKIFromESP(t *testing.T) {
	t.Parallel()
	allARM64Boots(t)
	out := arm64Output(t)
	dir := t.TempDir()
	placeholder := filepath.Join(dir, "empty-root")
	if err := os.WriteFile(placeholder, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	esp := filepath.Join(dir, "esp.raw")
	if err := diskimage.Write(esp, diskimage.Options{Architecture: "arm64", UKI: filepath.Join(out, artifacts.FileUKI), Root: placeholder, Seed: "esp-test"}); err != nil {
		t.Fatal(err)
	}
	bootARM64(t, qemu.Config{Disks: []string{esp}, ExtraArgs: []string{"-snapshot"}}, toMultiUser, "osb-init: starting: mode=memory root=initrd")
}

// TestBootARM64ISO: image.iso as a CD (virtio-scsi on the virt machine).
func TestBootARM64ISO(t *testing.T) {
	t.Parallel()
	allARM64Boots(t)
	out := arm64Output(t)
	bootARM64(t, qemu.Config{CDROM: filepath.Join(out, artifacts.FileISO)}, toMultiUser)
}
