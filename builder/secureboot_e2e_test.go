package builder

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/uki"
)

// The test image's boot report on Secure Boot and PCR 11
// (recipes/layers/files/ironcore/boot-report).
const secureBootEnabled = "osb-boot-report: secure boot: enabled"

var pcr11Report = regexp.MustCompile(`osb-boot-report: secure boot: \w+; pcr11: ([0-9a-f]{64})`)

// signedOutput is the test image built with --sign-key (make test-image)
// and an OVMF variable store with its certificate enrolled as PK, KEK and
// db, Secure Boot on.
func signedOutput(t *testing.T) (out, vars string) {
	t.Helper()
	out = testutil.Output(t, testutil.SignedTestOutputEnv)
	certPath := os.Getenv(testutil.SignCertEnv)
	if certPath == "" {
		testutil.Missing(t, "%s unset: run the tests through `make test`", testutil.SignCertEnv)
	}
	testutil.RequireFiles(t, qemu.OVMFCodeSecureBoot, qemu.OVMFVars)
	block, _ := pem.Decode(testutil.ReadFile(t, certPath))
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s: no PEM certificate", certPath)
	}
	vars = filepath.Join(t.TempDir(), "OVMF_VARS.sb.fd")
	keys := qemu.SecureBootKeys{PK: block.Bytes, KEK: block.Bytes, DB: block.Bytes}
	if err := qemu.EnrollSecureBoot(qemu.OVMFVars, vars, keys); err != nil {
		t.Fatal(err)
	}
	return out, vars
}

// bootSecure boots cfg under OVMF's enforcing firmware with the signed
// image's key enrolled, expects the test image's boot markers, and the
// booted system to report Secure Boot enabled from its SecureBoot efivar.
func bootSecure(t *testing.T, vars string, cfg qemu.Config) *qemu.VM {
	t.Helper()
	cfg.SecureBoot, cfg.Vars = true, vars
	cfg.FailureMarkers = append(append([]string{}, qemu.DefaultFailureMarkers...), "Access Denied")
	vm := bootAndExpect(t, cfg, toMultiUser)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := vm.WaitFor(ctx, secureBootEnabled); err != nil {
		t.Fatal(err)
	}
	return vm
}

// TestSignedManifests: the signed build says so in manifest.json, the
// unsigned one says it is unsigned.
func TestSignedManifests(t *testing.T) {
	signed, err := osimage.ReadManifest(testutil.Output(t, testutil.SignedTestOutputEnv))
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := osimage.ReadManifest(testOutput(t))
	if err != nil {
		t.Fatal(err)
	}
	if sb := signed.SecureBoot; sb == nil || !sb.Signed || sb.CertificateSHA256 == "" || !sb.PCRSignature {
		t.Errorf("signed build: secureBoot = %+v", sb)
	}
	if sb := unsigned.SecureBoot; sb == nil || sb.Signed {
		t.Errorf("unsigned build: secureBoot = %+v", sb)
	}
}

// TestSecureBootDisk boots the signed disk.raw from its ESP under
// enforcing firmware.
func TestSecureBootDisk(t *testing.T) {
	t.Parallel()
	out, vars := signedOutput(t)
	disk := filepath.Join(t.TempDir(), "disk.raw")
	if err := command.Run(context.Background(), "cp", "--sparse=always", filepath.Join(out, artifacts.FileDisk), disk); err != nil {
		t.Fatal(err)
	}
	bootSecure(t, vars, qemu.Config{Disks: []string{disk}})
}

// TestSecureBootISO: the signed image.iso boots, under enforcing firmware,
// exactly the signed uki.efi, so it is not booted here. The El Torito
// catalog's EFI entry (what a firmware follows on a CD) points at a FAT
// whose EFI/BOOT/BOOTX64.EFI is out/test-signed/uki.efi byte for byte:
// TestSecureBootHTTPMeasured boots that file under the same enforcing
// firmware to multi-user with Secure Boot reported enabled, TestBootISO
// boots the unsigned ISO's identical layout as a CD, and
// TestSignedUKICarriesCmdline checks the file's signature and .cmdline.
func TestSecureBootISO(t *testing.T) {
	out := testutil.Output(t, testutil.SignedTestOutputEnv)
	iso := filepath.Join(out, artifacts.FileISO)
	got := fatFile(t, iso, elToritoEFIImage(t, iso), "::EFI/BOOT/BOOTX64.EFI")
	if want := testutil.ReadFile(t, filepath.Join(out, artifacts.FileUKI)); !bytes.Equal(got, want) {
		t.Errorf("the El Torito EFI image's BOOTX64.EFI (%d bytes) is not %s's %s (%d bytes)", len(got), out, artifacts.FileUKI, len(want))
	}
}

// TestSecureBootHTTPMeasured boots the signed uki.efi by UEFI HTTP boot
// under enforcing firmware with a TPM 2.0 (swtpm). PCR 11 in the booted
// system is systemd-stub's measurement of the UKI followed by the phases
// systemd's pcrphase units extend after switch-root, "sysinit" and
// "ready" (our init is not systemd: no initrd phases), as predicted from
// the file.
func TestSecureBootHTTPMeasured(t *testing.T) {
	t.Parallel()
	out, vars := signedOutput(t)
	testutil.RequireTool(t, qemu.SWTPMBinary)
	ukiPath := filepath.Join(out, artifacts.FileUKI)
	want, err := uki.PredictPCR11(testutil.ReadFile(t, ukiPath), "sysinit:ready")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/efi")
		http.ServeFile(w, r, ukiPath)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tpm, err := qemu.StartTPM(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tpm.Stop)
	vm := bootSecure(t, vars, qemu.Config{
		MemoryMB:  3072,
		TPMSocket: tpm.Socket,
		Net: &qemu.NetConfig{
			BootFile:     "http://10.0.2.2:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + "/boot/uki.efi",
			NoROM:        true,
			HTTPBootOnly: true,
		},
	})
	// The report line comes over a serial console: the "secure boot:" part
	// bootSecure waited for may be there before the PCR value is.
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		m = pcr11Report.FindStringSubmatch(qemu.StripANSI(vm.Console()))
	}
	if m == nil {
		t.Fatalf("no PCR 11 in the boot report:\n%s", vm.Tail(10))
	}
	if m[1] != fmt.Sprintf("%x", want) {
		t.Errorf("PCR 11 in the guest is %s, predicted %x (stub + sysinit + ready)", m[1], want)
	}
	// The UKI's .pcrsig signs a policy for exactly that value.
	sigs, err := uki.SectionData(testutil.ReadFile(t, ukiPath), uki.SectionPCRSig)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string][]uki.PCRSignature
	if err := json.Unmarshal(sigs, &doc); err != nil {
		t.Fatal(err)
	}
	pol := uki.PolicyPCR11(want)
	if !slices.ContainsFunc(doc["sha256"], func(s uki.PCRSignature) bool { return s.Policy == hex.EncodeToString(pol[:]) }) {
		t.Errorf(".pcrsig signs no policy for the PCR 11 the guest reached: %s", sigs)
	}
}

// TestSecureBootRefusesUnsignedImage: the same image built without a key
// (out/test) is refused by the firmware that boots the signed one
// (TestSecureBootDisk is the control); the boot ends at the refusal.
func TestSecureBootRefusesUnsignedImage(t *testing.T) {
	t.Parallel()
	_, vars := signedOutput(t)
	disk := filepath.Join(t.TempDir(), "disk.raw")
	if err := command.Run(context.Background(), "cp", "--sparse=always", filepath.Join(testOutput(t), artifacts.FileDisk), disk); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	vm := qemutest.StartT(t, ctx, qemu.Config{
		UEFI: true, SecureBoot: true, Vars: vars, Disks: []string{disk}, MemoryMB: 1024, NoReboot: true,
		FailureMarkers: []string{"EFI stub:", "Linux version", "osb-init:"},
	})
	if _, err := vm.WaitFor(ctx, "Access Denied"); err != nil {
		t.Fatal(err)
	}
}

// TestSignedUKICarriesCmdline: the signed uki.efi (the ISO's is the same
// file) carries the image's command line as .cmdline, as Debian's objdump
// lists it, under a signature sbverify accepts: without it systemd-stub
// would take the boot loader's line under Secure Boot.
func TestSignedUKICarriesCmdline(t *testing.T) {
	out := testutil.Output(t, testutil.SignedTestOutputEnv)
	certPath := os.Getenv(testutil.SignCertEnv)
	if certPath == "" {
		testutil.Missing(t, "%s unset: run the tests through `make test`", testutil.SignCertEnv)
	}
	efi := filepath.Join(out, artifacts.FileUKI)
	headers := testutil.Run(t, testutil.RequireTool(t, "objdump"), "-h", efi)
	if !regexp.MustCompile(`(?m)^\s*\d+ \.cmdline +0*[1-9a-f]`).Match(headers) {
		t.Errorf("objdump -h %s: no non-empty .cmdline:\n%s", efi, headers)
	}
	testutil.Run(t, testutil.RequireTool(t, "sbverify"), "--cert", certPath, efi)
	got, err := uki.SectionData(testutil.ReadFile(t, efi), uki.SectionCmdline)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(testutil.ReadFile(t, filepath.Join(out, artifacts.FileCmdline)))); string(got) != want {
		t.Errorf(".cmdline = %q, want the image's command line %q", got, want)
	}
}
