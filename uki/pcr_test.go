package uki

import (
	"bytes"
	"context"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

const systemdMeasure = "/usr/lib/systemd/systemd-measure"

// signedTestUKI builds testOptions' UKI signed with the package's test key.
func signedTestUKI(t *testing.T) ([]byte, Options) {
	t.Helper()
	dir := testKeyDir(t)
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions(hostStub(t))
	opts.Signer, opts.Certificate = key, cert
	img, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	return img, opts
}

// TestPolicyPCR pins the TPM2 PolicyPCR digest: a golden made once, also
// checked against systemd-measure by TestPCRSigMatchesSystemdMeasure.
func TestPolicyPCR(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value [32]byte
	}{
		{"zero", [32]byte{}},
		{"stub-measured", predictPCR11(252, digests(map[string][]byte{SectionLinux: []byte("kernel"), SectionCmdline: []byte("console=ttyS0")}), "")},
		{"after-phases", predictPCR11(253, digests(map[string][]byte{SectionLinux: []byte("kernel"), SectionUname: []byte("6.1.0")}), "enter-initrd:leave-initrd")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := policyPCR(tc.value)
			got := fmt.Sprintf("pcr11=%x\npolicy=%x\n", tc.value, pol)
			testutil.Golden(t, filepath.Join("testdata", "pcr-"+tc.name+".golden"), []byte(got))
		})
	}
}

// TestPredictPCR11Order: which sections count and in which order depends
// on the stub's systemd version; empty sections and .pcrsig never count.
func TestPredictPCR11Order(t *testing.T) {
	base := map[string][]byte{SectionLinux: []byte("k"), SectionOSRel: []byte("o"), SectionUname: []byte("u"), SectionSBAT: []byte("s")}
	withSig := map[string][]byte{SectionPCRSig: []byte("sig"), SectionInitrd: nil}
	for k, v := range base {
		withSig[k] = v
	}
	if predictPCR11(252, digests(base), "") != predictPCR11(252, digests(map[string][]byte{SectionLinux: []byte("k"), SectionOSRel: []byte("o")}), "") {
		t.Error("systemd 252's stub does not measure .uname or .sbat")
	}
	if predictPCR11(253, digests(base), "") == predictPCR11(252, digests(base), "") {
		t.Error("systemd 253's stub measures .uname and .sbat")
	}
	if predictPCR11(253, digests(base), "") != predictPCR11(253, digests(withSig), "") {
		t.Error(".pcrsig and empty sections must not be measured")
	}
	if predictPCR11(253, digests(base), "a:b") != predictPCR11(253, digests(base), "a:b") || predictPCR11(253, digests(base), "a:b") == predictPCR11(253, digests(base), "b:a") {
		t.Error("phases are extended in order")
	}
}

// TestPCRSigMatchesSystemdMeasure is the outside proof: systemd's own
// systemd-measure, given the sections of a UKI this package built, computes
// the same PCR 11 values (calculate) and, with a software TPM for its
// policy session, the same signed policies (sign) as .pcrsig holds.
func TestPCRSigMatchesSystemdMeasure(t *testing.T) {
	testutil.RequireFiles(t, systemdMeasure)
	img, opts := signedTestUKI(t)
	dir := t.TempDir()
	args := []string{}
	for _, s := range []struct{ name, flag string }{
		{SectionLinux, "linux"}, {SectionOSRel, "osrel"}, {SectionCmdline, "cmdline"},
		{SectionInitrd, "initrd"}, {SectionPCRPKey, "pcrpkey"},
	} {
		data, err := SectionData(img, s.name)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, s.flag)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--"+s.flag+"="+p)
	}
	phases := append([]string{""}, DefaultPCRPhases...)
	for _, ph := range phases {
		args = append(args, "--phase="+ph)
	}
	out := testutil.Run(t, systemdMeasure, append([]string{"calculate", "--bank=sha256", "--json=short"}, args...)...)
	var calc map[string][]struct {
		Phase string `json:"phase"`
		PCR   int    `json:"pcr"`
		Hash  string `json:"hash"`
	}
	if err := json.Unmarshal(out, &calc); err != nil {
		t.Fatalf("systemd-measure calculate: %v\n%s", err, out)
	}
	if len(calc["sha256"]) != len(phases) {
		t.Fatalf("systemd-measure calculate gave %d values, want %d:\n%s", len(calc["sha256"]), len(phases), out)
	}
	for _, c := range calc["sha256"] {
		want, err := PredictPCR11(img, c.Phase)
		if err != nil {
			t.Fatal(err)
		}
		if c.PCR != PCRKernelImage || c.Hash != hex.EncodeToString(want[:]) {
			t.Errorf("phase %q: systemd-measure says PCR %d = %s, we predict %x", c.Phase, c.PCR, c.Hash, want)
		}
	}

	// sign computes the policy digest in a TPM trial session.
	testutil.RequireTool(t, qemu.SWTPMBinary)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tpm, err := qemu.StartTPMServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tpm.Stop()
	keyPath := filepath.Join(testKeyDir(t), KeyFile)
	pub := filepath.Join(dir, "pub.pem")
	spki, err := x509.MarshalPKIXPublicKey(&opts.Signer.(*rsa.PrivateKey).PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: spki}), 0o644); err != nil {
		t.Fatal(err)
	}
	signArgs := []string{"sign", "--bank=sha256", "--json=short", "--private-key=" + keyPath, "--public-key=" + pub,
		"--tpm2-device=" + tpm.TCTI}
	for _, a := range args {
		if !strings.HasPrefix(a, "--phase=") {
			signArgs = append(signArgs, a)
		}
	}
	for _, ph := range DefaultPCRPhases {
		signArgs = append(signArgs, "--phase="+ph)
	}
	cmd := exec.CommandContext(ctx, systemdMeasure, signArgs...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	theirs, err := cmd.Output()
	if err != nil {
		t.Fatalf("systemd-measure sign: %v\n%s", err, stderr.Bytes())
	}
	ours, err := SectionData(img, SectionPCRSig)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal(theirs, &a); err != nil {
		t.Fatalf("systemd-measure sign: %v\n%s", err, theirs)
	}
	if err := json.Unmarshal(ours, &b); err != nil {
		t.Fatalf(".pcrsig: %v\n%s", err, ours)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf(".pcrsig differs from systemd-measure sign:\nours:   %s\ntheirs: %s", ours, theirs)
	}
}

// TestPCRSectionsOnlyWithRSAKey: unsigned UKIs carry no PCR signature.
func TestPCRSectionsOnlyWithRSAKey(t *testing.T) {
	img, err := Build(testOptions(hostStub(t)))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{SectionPCRSig, SectionPCRPKey} {
		if _, err := SectionData(img, s); err == nil {
			t.Errorf("unsigned UKI has %s", s)
		}
	}
	signed, _ := signedTestUKI(t)
	sig, err := SectionData(signed, SectionPCRSig)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string][]PCRSignature
	if err := json.Unmarshal(sig, &doc); err != nil || len(doc["sha256"]) != len(DefaultPCRPhases) {
		t.Errorf(".pcrsig %s: %v", sig, err)
	}
}

// FuzzPredictPCR11: any bytes give an error or a value, never a panic.
func FuzzPredictPCR11(f *testing.F) {
	if stub, err := os.ReadFile(hostStubPath); err == nil {
		f.Add(stub)
	}
	f.Add([]byte("MZ"))
	f.Fuzz(func(t *testing.T, pe []byte) {
		PredictPCR11(pe, "enter-initrd")
	})
}

// digests are the section digests predictPCR11 takes, of the non-empty
// sections of m.
func digests(m map[string][]byte) map[string][32]byte {
	d := map[string][32]byte{}
	for name, data := range m {
		if len(data) > 0 {
			d[name] = sha256.Sum256(data)
		}
	}
	return d
}
