package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/uki"
)

// TestManifestSecureBoot: the manifest says whether the UKI-bearing
// artifacts are signed, by which certificate, and whether they carry a
// PCR 11 signature; builds without them say nothing.
func TestManifestSecureBoot(t *testing.T) {
	const hostStub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"
	testutil.RequireFiles(t, hostStub)
	assembled := t.TempDir()
	if err := os.WriteFile(filepath.Join(assembled, step.StubFile), testutil.ReadFile(t, hostStub), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	if err := uki.GenerateKey(keys, "manifest test"); err != nil {
		t.Fatal(err)
	}
	key, cert, err := uki.LoadSigner(filepath.Join(keys, uki.KeyFile), filepath.Join(keys, uki.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	fp := sha256.Sum256(cert.Raw)
	pxe := []osimage.Artifact{{Kind: osimage.KindKernel}, {Kind: osimage.KindInitrd}}
	for _, tc := range []struct {
		name   string
		arts   []osimage.Artifact
		signed bool
		want   *osimage.SecureBoot
	}{
		{"pxe only", pxe, true, nil},
		{"unsigned uki", append(pxe, osimage.Artifact{Kind: osimage.KindUKI}), false, &osimage.SecureBoot{Signed: false}},
		{"unsigned iso", []osimage.Artifact{{Kind: osimage.KindISO}}, false, &osimage.SecureBoot{Signed: false}},
		{"signed disk", []osimage.Artifact{{Kind: osimage.KindDisk}}, true, &osimage.SecureBoot{
			Signed: true, Certificate: "CN=manifest test", CertificateSHA256: hex.EncodeToString(fp[:]), PCRSignature: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg Config
			if tc.signed {
				cfg.Signer, cfg.Cert = key, cert
			}
			got := SecureBoot(cfg, step.Assembled{Dir: assembled}, tc.arts)
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
