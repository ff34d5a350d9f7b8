package uki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestVerifySignatureAgreesWithSbverify: VerifySignature accepts what
// Debian's sbverify --cert accepts and refuses what it refuses: a UKI and
// a stub (trailing data) signed by the key, either unsigned, signed by
// another key, or signed and then changed in a section or a header.
func TestVerifySignatureAgreesWithSbverify(t *testing.T) {
	dir := testKeyDir(t)
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if err := GenerateKey(other, "someone else"); err != nil {
		t.Fatal(err)
	}
	otherKey, otherCert, err := LoadSigner(filepath.Join(other, KeyFile), filepath.Join(other, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := Build(testOptions(hostStub(t)))
	if err != nil {
		t.Fatal(err)
	}
	sign := func(img []byte, k crypto.Signer, c *x509.Certificate) []byte {
		out, err := Sign(img, k, c)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	signed := sign(unsigned, key, cert)
	p, _ := parsePE(signed)
	linux, _ := p.section(".linux")
	flipped := bytes.Clone(signed)
	flipped[linux.PointerToRawData+1000] ^= 1
	header := bytes.Clone(signed)
	header[p.sectionTableOff+8] ^= 1
	for _, tc := range []struct {
		name     string
		img      []byte
		ok       bool
		unsigned bool
	}{
		{"signed UKI", signed, true, false},
		{"signed stub", sign(hostStub(t), key, cert), true, false},
		{"unsigned UKI", unsigned, false, true},
		{"UKI signed by another key", sign(unsigned, otherKey, otherCert), false, false},
		{"signed UKI, a byte of .linux changed", flipped, false, false},
		{"signed UKI, a byte of the section table changed", header, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifySignature(tc.img, cert)
			if (err == nil) != tc.ok {
				t.Errorf("VerifySignature: %v, want ok %v", err, tc.ok)
			}
			if got := errors.Is(err, ErrUnsigned); got != tc.unsigned {
				t.Errorf("VerifySignature: %v, unsigned %v, want %v", err, got, tc.unsigned)
			}
			out, sbErr := sbverifyCert(t, filepath.Join(dir, CertFile), tc.img)
			if (sbErr == nil) != tc.ok {
				t.Errorf("sbverify --cert: %v, want ok %v:\n%s", sbErr, tc.ok, out)
			}
		})
	}
}

// FuzzVerifySignature: VerifySignature never panics on a certificate table
// it is handed, nor accepts a cut one. The fuzzed
// bytes replace the table of a signed image (its headers and sections
// stay valid), so they reach the WIN_CERTIFICATE and PKCS #7 parsers.
func FuzzVerifySignature(f *testing.F) {
	dir, err := os.MkdirTemp("", "uki-fuzz-keys-")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { os.RemoveAll(dir) })
	if err := GenerateKey(dir, "fuzz"); err != nil {
		f.Fatal(err)
	}
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		f.Fatal(err)
	}
	signed, err := Sign(syntheticStub(), key, cert)
	if err != nil {
		f.Fatal(err)
	}
	p, err := parsePE(signed)
	if err != nil {
		f.Fatal(err)
	}
	addr, _ := p.dir(dirSecurity)
	dirOff := p.dirOffset(dirSecurity)
	table := signed[addr:]
	f.Add(table)
	f.Add(table[:len(table)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, tbl []byte) {
		img := append(bytes.Clone(signed[:addr]), tbl...)
		binary.LittleEndian.PutUint32(img[dirOff+4:], uint32(len(tbl)))
		err := VerifySignature(img, cert)
		if err == nil && len(tbl) < len(table)/2 {
			t.Fatalf("accepted a table of %d bytes, the signature's is %d", len(tbl), len(table))
		}
	})
}
