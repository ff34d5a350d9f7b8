package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/uki"
)

// secureBoot is the manifest's account of how the UKI-bearing artifacts
// among arts were signed; nil when there are none.
func (a *artifactInputs) secureBoot(arts []osimage.Artifact) *osimage.SecureBoot {
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
	if a.cert == nil {
		return &osimage.SecureBoot{Signed: false}
	}
	fp := sha256.Sum256(a.cert.Raw)
	stub, _ := os.ReadFile(filepath.Join(a.assembled, stubFile))
	return &osimage.SecureBoot{
		Signed:            true,
		Certificate:       a.cert.Subject.String(),
		CertificateSHA256: hex.EncodeToString(fp[:]),
		PCRSignature:      uki.SignsPCR(stub, a.signer),
	}
}
