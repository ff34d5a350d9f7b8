package publish_test

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/publish"
	"github.com/ironcore-dev/os-builder/uki"
)

// testSigner is a key pair as `builder genkey` makes it.
func testSigner(t *testing.T) (crypto.Signer, *x509.Certificate) {
	t.Helper()
	dir := t.TempDir()
	if err := uki.GenerateKey(dir, "attestation test"); err != nil {
		t.Fatal(err)
	}
	key, cert, err := uki.LoadSigner(filepath.Join(dir, uki.KeyFile), filepath.Join(dir, uki.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	return key, cert
}

// signedOutput is an output whose UKIs manifest.json says cert signed.
func signedOutput(t *testing.T, cert *x509.Certificate) string {
	t.Helper()
	out := outputDir(t, "amd64")
	m, err := osimage.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	m.SecureBoot = &osimage.SecureBoot{Signed: true, Certificate: cert.Subject.String(), CertificateSHA256: publish.CertificateID(cert)}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(out, osimage.ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestSignedAttestations: the SBOM and provenance were unsigned referrers
// anyone with push access could replace. Pushed with a key, each is a
// DSSE envelope signed by it (the provenance's payloadType
// application/vnd.in-toto+json), and Verify checks them against the
// certificate the output was signed with (manifest.json's secureBoot) or
// the one it is given: unsigned attestations of a signed output, another
// key's signature, or a push with another certificate than the output's
// fail. Signing is deterministic: pushing again attaches nothing new.
func TestSignedAttestations(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	key, cert := testSigner(t)
	otherKey, otherCert := testSigner(t)
	signedWith := func(k crypto.Signer, c *x509.Certificate) publish.Options {
		o := insecure
		o.Signer, o.SignCert = k, c
		return o
	}
	verifyWith := func(c *x509.Certificate) publish.Options {
		o := insecure
		o.VerifyCert = c
		return o
	}
	signedOut := signedOutput(t, cert)
	unsignedOut := outputDir(t, "amd64")
	tests := []struct {
		name       string
		out        string
		push       publish.Options
		pushErr    string
		verify     publish.Options
		verifyErr  string
		signatures bool
	}{
		{"signed output, signed attestations", signedOut, signedWith(key, cert), "", insecure, "", true},
		{"signed output, unsigned attestations", signedOut, insecure, "", insecure, "not signed", false},
		{"signed output, another key", signedOut, signedWith(otherKey, otherCert), "not the certificate", insecure, "", false},
		{"unsigned output, signed attestations", unsignedOut, signedWith(key, cert), "", insecure, "", true},
		{"pinned certificate", unsignedOut, signedWith(key, cert), "", verifyWith(cert), "", true},
		{"pinned other certificate", unsignedOut, signedWith(key, cert), "", verifyWith(otherCert), "signed with certificate", true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref := host + "/signed/img" + string(rune('a'+i)) + ":1"
			_, err := publish.Push(ctx, tc.out, ref, tc.push)
			if tc.pushErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.pushErr) {
					t.Fatalf("push: %v, want %q", err, tc.pushErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			// Again: deterministic envelopes, nothing new attached.
			if _, err := publish.Push(ctx, tc.out, ref, tc.push); err != nil {
				t.Fatal(err)
			}
			_, err = publish.Verify(ctx, ref, []string{tc.out}, tc.verify)
			if tc.verifyErr == "" && err != nil || tc.verifyErr != "" && (err == nil || !strings.Contains(err.Error(), tc.verifyErr)) {
				t.Errorf("verify: %v, want %q", err, tc.verifyErr)
			}
			a, err := publish.FetchAttestations(ctx, ref, insecure)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.SBOMSignature != nil && a.ProvenanceSignature != nil; got != tc.signatures {
				t.Errorf("signed SBOM %v, provenance %v; want %v", a.SBOMSignature, a.ProvenanceSignature, tc.signatures)
			}
			if len(a.Referrers) != 2 {
				t.Errorf("%d referrers after two pushes, want 2", len(a.Referrers))
			}
		})
	}
}
