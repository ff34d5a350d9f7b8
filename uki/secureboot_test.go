package uki

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// OVMF's boot manager names a refused image: "BdsDxe: failed to load
// Boot0001 ... : Access Denied" (a Secure Boot security violation).
const accessDenied = "Access Denied"

var bootOK = regexp.MustCompile(`uki-boot-ok pid=1 cmdline="([^"]*)" secureboot=(\w+) pcr11=(\w+)`)

// TestSecureBootEnforced boots small UKIs (a real kernel and a one-binary
// initrd) from an ESP under OVMF's Secure Boot firmware whose db holds the
// test key, enrolled by qemu.EnrollSecureBoot, and a software TPM:
//   - signed with the enrolled key: boots, the kernel reports Secure Boot
//     enabled, and PCR 11 read first thing in user space is what
//     PredictPCR11 says for the stub's measurements alone; the init (pid
//     1, from the UKI's .initrd) printing this run's marker from the
//     .cmdline section proves systemd-stub ran and passed the embedded
//     command line and initrd to the kernel;
//   - unsigned, or signed with another key: the firmware refuses it.
//
// The signed boot is the refusals' control: without signing (or with a
// firmware that does not enforce) one of the two halves fails.
func TestSecureBootEnforced(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	kernelPath := testKernel(t)
	testutil.RequireTool(t, qemu.Binary)
	testutil.RequireFiles(t, qemu.OVMFCodeSecureBoot, qemu.OVMFVars)
	kernel := testutil.ReadFile(t, kernelPath)
	dir := testKeyDir(t)
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	if err := GenerateKey(otherDir, "not enrolled"); err != nil {
		t.Fatal(err)
	}
	otherKey, otherCert, err := LoadSigner(filepath.Join(otherDir, KeyFile), filepath.Join(otherDir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	vars := filepath.Join(work, "OVMF_VARS.sb.fd")
	if err := qemu.EnrollSecureBoot(qemu.OVMFVars, vars, qemu.SecureBootKeys{PK: cert.Raw, KEK: cert.Raw, DB: cert.Raw}); err != nil {
		t.Fatal(err)
	}
	initrd := bootInitrd(t)
	marker := fmt.Sprintf("osb.ukitest=%d", time.Now().UnixNano())
	esp := func(name string, signer crypto.Signer, c *x509.Certificate) (disk string, img []byte) {
		t.Helper()
		img, err := Build(Options{
			Stub: hostStub(t), Kernel: kernel, Initrd: initrd,
			Cmdline:   "console=ttyS0 panic=-1 loglevel=4 " + marker,
			OSRelease: "ID=debian\nPRETTY_NAME=\"secure boot test\"\n",
			Uname:     strings.TrimPrefix(filepath.Base(kernelPath), "vmlinuz-"),
			Signer:    signer, Certificate: c,
		})
		if err != nil {
			t.Fatal(err)
		}
		ukiPath := filepath.Join(work, name+".efi")
		placeholder := filepath.Join(work, name+".root")
		disk = filepath.Join(work, name+".raw")
		if err := os.WriteFile(ukiPath, img, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(placeholder, make([]byte, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := diskimage.Write(disk, diskimage.Options{UKI: ukiPath, Root: placeholder, Seed: name}); err != nil {
			t.Fatal(err)
		}
		return disk, img
	}
	boot := func(t *testing.T, disk string, tpm string, want string, failure ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		vm := qemutest.StartT(t, ctx, qemu.Config{
			UEFI: true, SecureBoot: true, Vars: vars, TPMSocket: tpm,
			Disks: []string{disk}, MemoryMB: 512, NoReboot: true,
			FailureMarkers: failure,
		})
		start := time.Now()
		if _, err := vm.WaitFor(ctx, want); err != nil {
			t.Fatal(err)
		}
		t.Logf("%q after %v", want, time.Since(start).Round(time.Second))
		if want == "uki-boot-ok" { // the init powers off after its line
			select {
			case <-vm.Done():
			case <-ctx.Done():
				t.Fatal("the init did not power off")
			}
		}
		return qemu.StripANSI(vm.Console())
	}

	t.Run("signed boots, measured", func(t *testing.T) {
		disk, img := esp("signed", key, cert)
		tpmSock := ""
		if testutil.CI() || haveTool(qemu.SWTPMBinary) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			tpm, err := qemu.StartTPM(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tpm.Stop()
			tpmSock = tpm.Socket
		}
		console := boot(t, disk, tpmSock, "uki-boot-ok", accessDenied, "Kernel panic")
		m := bootOK.FindStringSubmatch(console)
		if m == nil {
			t.Fatalf("no report line on the console")
		}
		t.Logf("guest reports cmdline=%q secureboot=%s pcr11=%s", m[1], m[2], m[3])
		if !strings.Contains(m[1], marker) {
			t.Errorf("kernel command line lacks the .cmdline marker %q: %q", marker, m[1])
		}
		if m[2] != "enabled" {
			t.Errorf("kernel says Secure Boot %s, want enabled", m[2])
		}
		if tpmSock == "" {
			t.Log("swtpm not installed: PCR 11 not checked")
			return
		}
		want, err := PredictPCR11(img, "")
		if err != nil {
			t.Fatal(err)
		}
		if m[3] != fmt.Sprintf("%x", want) {
			t.Errorf("PCR 11 in the guest is %s, predicted %x", m[3], want)
		}
	})
	t.Run("unsigned refused", func(t *testing.T) {
		disk, _ := esp("unsigned", nil, nil)
		boot(t, disk, "", accessDenied, "uki-boot-ok")
	})
	t.Run("other key refused", func(t *testing.T) {
		disk, _ := esp("other", otherKey, otherCert)
		boot(t, disk, "", accessDenied, "uki-boot-ok")
	})
}

func haveTool(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}
