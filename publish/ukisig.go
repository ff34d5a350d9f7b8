package publish

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/uki"
)

// checkUKISignatures checks that every UKI of the outputs dirs carries an
// Authenticode signature by cert, read from the artifact itself (opened
// inside its output, its size and digest checked against manifest.json
// first): manifest.json's secureBoot is the build's claim, not proof, and
// the release key must not vouch for a UKI it did not sign.
func checkUKISignatures(dirs []string, cert *x509.Certificate) error {
	for _, d := range dirs {
		m, err := osimage.ReadManifest(d)
		if err != nil {
			return err
		}
		for _, a := range m.Artifacts {
			if a.Kind != osimage.KindUKI {
				continue
			}
			pe, err := readArtifact(d, a)
			if err != nil {
				return err
			}
			if err := uki.VerifySignature(pe, cert); err != nil {
				return fmt.Errorf("%s: not signed with certificate %s (%s): %w", filepath.Join(d, a.Path), CertificateID(cert), cert.Subject, err)
			}
		}
	}
	return nil
}

// readArtifact reads artifact a of the output dir, inside dir, refusing a
// file whose size or sha256 is not manifest.json's.
func readArtifact(dir string, a osimage.Artifact) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(a.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() != a.Size {
		return nil, fmt.Errorf("%s: %d bytes (%s), %s says %d", filepath.Join(dir, a.Path), fi.Size(), fi.Mode().Type(), osimage.ManifestFile, a.Size)
	}
	b := make([]byte, a.Size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, a.Path), err)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != a.SHA256 {
		return nil, fmt.Errorf("%s: sha256 %x, %s says %s", filepath.Join(dir, a.Path), sum, osimage.ManifestFile, a.SHA256)
	}
	return b, nil
}
