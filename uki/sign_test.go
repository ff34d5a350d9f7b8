package uki

import (
	"bytes"
	"crypto/x509"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

var (
	keyOnce sync.Once
	keyDir  string
	keyErr  error
)

// testKeyDir generates one key pair for the whole test binary (RSA key
// generation takes a while on a shared machine).
func testKeyDir(t *testing.T) string {
	t.Helper()
	keyOnce.Do(func() {
		keyDir, keyErr = os.MkdirTemp("", "uki-keys-")
		if keyErr == nil {
			keyErr = GenerateKey(keyDir, "os-builder test db")
		}
	})
	if keyErr != nil {
		t.Fatal(keyErr)
	}
	return keyDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if keyDir != "" {
		os.RemoveAll(keyDir)
	}
	os.Exit(code)
}

func sbverifyCert(t *testing.T, certPath string, img []byte) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "uki.efi")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(testutil.RequireTool(t, "sbverify"), "--cert", certPath, path).CombinedOutput()
	return string(out), err
}

func TestSignVerifiesWithSbverify(t *testing.T) {
	dir := testKeyDir(t)
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions(hostStub(t))
	unsigned, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	signed, err := Sign(unsigned, key, cert)
	if err != nil {
		t.Fatal(err)
	}
	checkInvariants(t, signed, opts)
	if out, err := sbverifyCert(t, filepath.Join(dir, CertFile), signed); err != nil {
		t.Fatalf("sbverify rejected the signed UKI: %v\n%s", err, out)
	}

	t.Run("reproducible", func(t *testing.T) {
		again, err := Sign(unsigned, key, cert)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, signed) {
			t.Error("signing twice gave different bytes")
		}
		resigned, err := Sign(signed, key, cert)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(resigned, signed) {
			t.Error("re-signing a signed image did not replace the signature in place")
		}
	})

	t.Run("streaming signer equals Sign", func(t *testing.T) {
		o := opts
		o.Signer, o.Certificate = key, cert
		streamed, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		// A signing build adds .pcrpkey and .pcrsig after the caller's
		// sections; the unsigned build given the same ones lays out alike.
		u := opts
		for _, name := range []string{SectionPCRPKey, SectionPCRSig} {
			data, err := SectionData(streamed, name)
			if err != nil {
				t.Fatal(err)
			}
			u.Sections = append(u.Sections, Section{Name: name, Data: data})
		}
		unsignedPCR, err := Build(u)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Sign(unsignedPCR, key, cert)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(streamed, want) {
			t.Error("Build with Signer differs from Sign(Build)")
		}
	})

	t.Run("tampering is detected", func(t *testing.T) {
		p, _ := parsePE(signed)
		linux, _ := p.section(".linux")
		cmdline, _ := p.section(".cmdline")
		for name, off := range map[string]uint32{
			".linux":        linux.PointerToRawData + 1000,
			".cmdline":      cmdline.PointerToRawData,
			"section table": uint32(p.sectionTableOff) + 8,
		} {
			bad := bytes.Clone(signed)
			bad[off] ^= 0x01
			if out, err := sbverifyCert(t, filepath.Join(dir, CertFile), bad); err == nil {
				t.Errorf("sbverify accepted an image with a flipped byte in %s:\n%s", name, out)
			}
		}
	})

	t.Run("signed stub is accepted and its signature dropped", func(t *testing.T) {
		signedStub, err := Sign(opts.Stub, key, cert)
		if err != nil {
			t.Fatal(err)
		}
		o := opts
		o.Stub = signedStub
		img, err := Build(o)
		if err != nil {
			t.Fatal(err)
		}
		checkInvariants(t, img, o)
		if !bytes.Equal(img, unsigned) {
			t.Error("UKI from a signed stub differs from the one from the unsigned stub")
		}
	})

	t.Run("other certificate is rejected", func(t *testing.T) {
		other := t.TempDir()
		if err := GenerateKey(other, "someone else"); err != nil {
			t.Fatal(err)
		}
		if out, err := sbverifyCert(t, filepath.Join(other, CertFile), signed); err == nil {
			t.Errorf("sbverify accepted the signature with an unrelated certificate:\n%s", out)
		}
	})
}

// The stub itself has trailing data (its COFF symbol table) and an odd size:
// Sign must pad and hash it the way sbverify expects.
func TestSignArbitraryPE(t *testing.T) {
	dir := testKeyDir(t)
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	stub := hostStub(t)
	signed, err := Sign(stub, key, cert)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := sbverifyCert(t, filepath.Join(dir, CertFile), signed); err != nil {
		t.Fatalf("sbverify rejected the signed stub: %v\n%s", err, out)
	}
	off := checksumFieldOffset(t, signed)
	if got, want := binary.LittleEndian.Uint32(signed[off:]), refChecksum(signed, off); got != want {
		t.Errorf("checksum %#x, want %#x", got, want)
	}
}

func TestGenerateKeyAndLoadSigner(t *testing.T) {
	dir := testKeyDir(t)
	_, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageCodeSigning) || cert.Subject.CommonName != "os-builder test db" {
		t.Errorf("certificate: EKU %v, subject %v", cert.ExtKeyUsage, cert.Subject)
	}
	if st, err := os.Stat(filepath.Join(dir, KeyFile)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", st.Mode(), err)
	}
	if err := GenerateKey(dir, "again"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("GenerateKey over existing files: %v", err)
	}
	other := t.TempDir()
	if err := GenerateKey(other, "other"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(other, CertFile)); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("mismatched key and certificate: %v", err)
	}
	if _, _, err := LoadSigner(filepath.Join(dir, CertFile), filepath.Join(dir, CertFile)); err == nil {
		t.Error("a certificate was accepted as a key")
	}
}

// TestSignedUKINeedsCmdline: a UKI without .cmdline makes systemd-stub take
// the boot loader's command line even under Secure Boot, so a signed one
// would boot whatever line the loader is told (osb.root=http://elsewhere,
// rdinit=/bin/sh). Neither a signing build nor Sign makes one; unsigned
// builds and PE files that are not UKIs (a stub) stay signable.
func TestSignedUKINeedsCmdline(t *testing.T) {
	dir := testKeyDir(t)
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmdline := range []string{"", " \n\t"} {
		opts := testOptions(syntheticStub())
		opts.Cmdline = cmdline
		unsigned, err := Build(opts)
		if err != nil {
			t.Fatalf("unsigned build with cmdline %q: %v", cmdline, err)
		}
		if _, err := SectionData(unsigned, SectionCmdline); err == nil {
			t.Fatalf("cmdline %q: the unsigned UKI has a .cmdline", cmdline)
		}
		opts.Signer, opts.Certificate = key, cert
		if _, err := Build(opts); err == nil || !strings.Contains(err.Error(), "Options.Cmdline") {
			t.Errorf("signing build with cmdline %q: err = %v, want a refusal naming Options.Cmdline", cmdline, err)
		}
		if _, err := Sign(unsigned, key, cert); err == nil || !strings.Contains(err.Error(), "no .cmdline") {
			t.Errorf("Sign of a UKI with cmdline %q: err = %v, want a refusal (no .cmdline)", cmdline, err)
		}
	}
	if _, err := Sign(syntheticStub(), key, cert); err != nil {
		t.Errorf("Sign of a stub (no .linux, not a UKI): %v", err)
	}
}
