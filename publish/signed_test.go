package publish_test

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
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

// hostStubPath is the host's systemd-stub (package systemd-boot-efi).
const hostStubPath = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// ukiOutput is an output of arch whose uki.efi is a real UKI (the host's
// systemd-stub, the fake kernel and initrd), Authenticode-signed with
// signer and signCert unless signer is nil, and whose manifest.json's
// secureBoot claims the certificate claim signed it (nil: unsigned).
func ukiOutput(t *testing.T, arch string, signer crypto.Signer, signCert, claim *x509.Certificate) string {
	t.Helper()
	testutil.RequireFiles(t, hostStubPath)
	out := outputDir(t, arch)
	img, err := uki.Build(uki.Options{
		Stub: testutil.ReadFile(t, hostStubPath), Kernel: osimagetest.Content(osimage.KindKernel, arch),
		Initrd: osimagetest.Content(osimage.KindInitrd, arch), Cmdline: osimagetest.Cmdline, SourceDateEpoch: 1700000000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if signer != nil {
		if img, err = uki.Sign(img, signer, signCert); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WriteFile(t, out, osimagetest.DefaultFiles[osimage.KindUKI], img)
	rewriteManifest(t, out)
	if claim != nil {
		m, err := osimage.ReadManifest(out)
		if err != nil {
			t.Fatal(err)
		}
		m.SecureBoot = &osimage.SecureBoot{Signed: true, Certificate: claim.Subject.String(), CertificateSHA256: publish.CertificateID(claim)}
		b, _ := json.MarshalIndent(m, "", "  ")
		testutil.WriteFile(t, out, osimage.ManifestFile, b)
	}
	return out
}

// signedOutputDir is ukiOutput of arch signed with the key pair `builder
// genkey` wrote into keys, as a build with --sign-key makes it.
func signedOutputDir(t *testing.T, arch, keys string) string {
	t.Helper()
	key, cert, err := uki.LoadSigner(filepath.Join(keys, uki.KeyFile), filepath.Join(keys, uki.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	return ukiOutput(t, arch, key, cert, cert)
}

// TestSignedAttestations: the SBOM and provenance were unsigned referrers
// anyone with push access could replace. Pushed with a key, each is a
// DSSE envelope signed by it (the provenance's payloadType
// application/vnd.in-toto+json), and Verify checks them against the
// certificate the output was signed with (manifest.json's secureBoot) or
// the one it is given: unsigned attestations of a signed output, another
// key's signature, or a push with another certificate than the output's
// fail. The key signs the attestations only of outputs whose UKIs it
// signed, read from the UKIs themselves (finding 5 of issue 27): an
// unsigned UKI, or one another key signed, is refused whatever
// manifest.json claims, and nothing is pushed. Signing is deterministic:
// pushing again attaches nothing new.
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
	signedOut := ukiOutput(t, "amd64", key, cert, cert)
	unsignedOut := ukiOutput(t, "amd64", nil, nil, nil)
	signedNoClaim := ukiOutput(t, "amd64", key, cert, nil)
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
		{"unsigned output, signed attestations", unsignedOut, signedWith(key, cert), "no Authenticode signature", insecure, "", false},
		{"claims the key, UKI unsigned", ukiOutput(t, "amd64", nil, nil, cert), signedWith(key, cert), "uki.efi: not signed with certificate", insecure, "", false},
		{"claims the key, UKI signed by another", ukiOutput(t, "amd64", otherKey, otherCert, cert), signedWith(key, cert), "uki.efi: not signed with certificate", insecure, "", false},
		{"no UKI, signed attestations", outputDir(t, "amd64", osimage.KindKernel, osimage.KindInitrd), signedWith(key, cert), "", insecure, "", true},
		{"pinned certificate", signedNoClaim, signedWith(key, cert), "", verifyWith(cert), "", true},
		{"pinned other certificate", signedNoClaim, signedWith(key, cert), "", verifyWith(otherCert), "signed with certificate", true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ref := host + "/signed/img" + string(rune('a'+i)) + ":1"
			_, err := publish.Push(ctx, tc.out, ref, tc.push)
			if tc.pushErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.pushErr) {
					t.Fatalf("push: %v, want %q", err, tc.pushErr)
				}
				if _, err := publish.Inspect(ctx, ref, insecure); err == nil {
					t.Errorf("a refused push pushed %s", ref)
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
