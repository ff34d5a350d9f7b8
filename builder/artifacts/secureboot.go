package artifacts

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/uki"
)

// SecureBoot is the manifest's account of how the UKI-bearing artifacts
// among arts were signed (with cfg's signer, and the PCR signature the
// image's stub a takes); nil when there are none.
func SecureBoot(cfg Config, a step.Assembled, arts []osimage.Artifact) *osimage.SecureBoot {
	hasUKI := false
	for _, art := range arts {
		switch art.Kind {
		case osimage.KindUKI, osimage.KindDisk, osimage.KindISO:
			hasUKI = true
		}
	}
	if !hasUKI {
		return nil
	}
	if cfg.Cert == nil {
		return &osimage.SecureBoot{Signed: false}
	}
	fp := sha256.Sum256(cfg.Cert.Raw)
	stub, _ := fsroot.ReadPath(a.Stub(), maxStubSize)
	return &osimage.SecureBoot{
		Signed:            true,
		Certificate:       cfg.Cert.Subject.String(),
		CertificateSHA256: hex.EncodeToString(fp[:]),
		PCRSignature:      uki.SignsPCR(stub, cfg.Signer),
	}
}
