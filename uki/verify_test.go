package uki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
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
