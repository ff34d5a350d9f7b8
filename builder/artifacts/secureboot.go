package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
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

// CheckSigning refuses a signing build whose uki.efi (outputs uki, iso)
// would carry no .cmdline (uki.ErrSignedNoCmdline), before anything is
// built. The disk's UKI always has one (osb.root=). Refused rather than
// given a filler: with an empty line the recipe leaves the command line to
// the boot loader, which a signed UKI would now ignore; its author says
// what the image boots with.
func (c Config) CheckSigning() error {
	return checkSignedCmdline(c, c.Cmdline, c.Outputs[recipe.OutputUKI] || c.Outputs[recipe.OutputISO])
}

func checkSignedCmdline(c Config, cmdline string, makesUKI bool) error {
	if c.Signer == nil || !makesUKI || strings.TrimSpace(cmdline) != "" {
		return nil
	}
	return fmt.Errorf("the recipe's kernel command line is empty: set kernel.cmdline (e.g. console=ttyS0) to sign uki.efi: %w", uki.ErrSignedNoCmdline)
}
