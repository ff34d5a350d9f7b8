package publish

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/osimage"
)

// Attested is what is attached to a pushed index, fetched and parsed.
type Attested struct {
	Digest    string // the index
	Referrers []Referrer
	// SBOM and Provenance are the attached documents, parsed, with the
	// bytes they were parsed from.
	SBOM            *SPDXDocument
	SBOMBytes       []byte
	Provenance      *Statement
	Predicate       *SLSAProvenance
	ProvenanceBytes []byte
	// SBOMSignature and ProvenanceSignature: how each was signed (its
	// DSSE envelope verified), nil for an unsigned document.
	SBOMSignature, ProvenanceSignature *Signature
}

// FetchAttestations lists the referrers of the index ref names in its
// registry and fetches, checks and parses its SBOM and provenance: each
// referrer manifest must name the index as subject, each blob match its
// digest, and the provenance be about the index. It fails unless both are
// there.
func FetchAttestations(ctx context.Context, ref string, opts Options) (*Attested, error) {
	r, err := resolve(ctx, ref, opts)
	if err != nil {
		return nil, err
	}
	if r.remote == nil {
		return nil, fmt.Errorf("%s: attestations are attached in registries only", ref)
	}
	refs, err := listReferrers(ctx, r.remote.Context(), r.digest, opts)
	if err != nil {
		return nil, err
	}
	a := &Attested{Digest: r.digest.String(), Referrers: refs}
	for _, rf := range refs {
		switch rf.ArtifactType {
		case ArtifactTypeSPDX, ArtifactTypeInToto:
		default:
			continue
		}
		f, err := fetchAttestation(ctx, r.remote.Context(), rf, r.digest, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		// A signed document whose signature does not verify is no document.
		b, sig, err := openSigned(f, rf.ArtifactType)
		if err != nil {
			return nil, fmt.Errorf("%s: referrer %s: %w", ref, rf.Digest, err)
		}
		if rf.ArtifactType == ArtifactTypeSPDX {
			if a.SBOM != nil {
				return nil, fmt.Errorf("%s: two SBOMs attached", ref)
			}
			if a.SBOM, err = ParseSBOM(b); err != nil {
				return nil, fmt.Errorf("%s: referrer %s: %w", ref, rf.Digest, err)
			}
			a.SBOMBytes, a.SBOMSignature = b, sig
			continue
		}
		if a.Provenance != nil {
			return nil, fmt.Errorf("%s: two provenance statements attached", ref)
		}
		if a.Provenance, a.Predicate, err = ParseProvenance(b); err != nil {
			return nil, fmt.Errorf("%s: referrer %s: %w", ref, rf.Digest, err)
		}
		if got := "sha256:" + a.Provenance.Subject[0].Digest["sha256"]; got != a.Digest {
			return nil, fmt.Errorf("%s: provenance %s is about %s, not %s", ref, rf.Digest, got, a.Digest)
		}
		a.ProvenanceBytes, a.ProvenanceSignature = b, sig
	}
	var missing []string
	if a.SBOM == nil {
		missing = append(missing, ArtifactTypeSPDX)
	}
	if a.Provenance == nil {
		missing = append(missing, ArtifactTypeInToto)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: no %s referrer attached to %s", ref, strings.Join(missing, " or "), a.Digest)
	}
	return a, nil
}

// Verify checks that ref holds exactly the image Push makes of the output
// directories dirs, and, for a registry, that the SBOM and provenance are
// attached and describe it. Images are reproducible, so the index digest
// computed from dirs (from their manifest.json digests; no artifact is
// read but the initrd and disk the V2 layers are cut and converted from)
// must equal the pushed one: any manifest, config or layer that
// differs shows, and is named. It returns the inspection of ref.
func Verify(ctx context.Context, ref string, dirs []string, opts Options) (*Inspection, error) {
	if len(dirs) == 0 {
		return nil, errors.New("verify: no output directory")
	}
	dirs, err := expandOutputs(dirs)
	if err != nil {
		return nil, err
	}
	ins, err := Inspect(ctx, ref, opts)
	if err != nil {
		return nil, err
	}
	// A push with --no-v2 holds no V2 manifest; with V2, every one must
	// be there and be the same.
	hasV2 := slices.ContainsFunc(ins.Manifests, func(m InspectedManifest) bool { return m.Kind != KindV1 })
	local, err := osimage.NewIndexOf(osimage.IndexOptions{NoV2: !hasV2}, dirs...)
	if err != nil {
		return nil, err
	}
	want, err := local.Digest()
	if err != nil {
		return nil, err
	}
	if ins.Digest != want.String() {
		return ins, fmt.Errorf("%s is %s, the outputs %s make %s: %s", ref, ins.Digest, strings.Join(dirs, ", "), want, archDiff(ins, local, dirs))
	}
	t, err := ParseTarget(ref, opts)
	if err != nil || t.Remote == nil {
		return ins, err
	}
	a, err := FetchAttestations(ctx, ref, opts)
	if err != nil {
		return ins, err
	}
	if a.Digest != ins.Digest {
		return ins, fmt.Errorf("%s moved from %s to %s while it was verified", ref, ins.Digest, a.Digest)
	}
	// The certificates the attestations must be signed with: the one the
	// outputs' UKIs are signed with, and the one the caller pins.
	signers := map[string]string{}
	if opts.VerifyCert != nil {
		signers[CertificateID(opts.VerifyCert)] = "the certificate given"
	}
	for _, d := range dirs {
		m, err := osimage.ReadManifest(d)
		if err != nil {
			return ins, err
		}
		if err := sbomCovers(a.SBOM, m); err != nil {
			return ins, fmt.Errorf("%s: %w", ref, err)
		}
		if sb := m.SecureBoot; sb != nil && sb.Signed && sb.CertificateSHA256 != "" {
			signers[sb.CertificateSHA256] = "the certificate " + d + " is signed with"
		}
	}
	for id, what := range signers {
		for _, s := range []struct {
			doc string
			sig *Signature
		}{{"SBOM", a.SBOMSignature}, {"provenance", a.ProvenanceSignature}} {
			switch {
			case s.sig == nil:
				return ins, fmt.Errorf("%s: the %s is not signed; want a signature by %s (%s)", ref, s.doc, what, id)
			case s.sig.KeyID != id:
				return ins, fmt.Errorf("%s: the %s is signed with certificate %s, not %s (%s)", ref, s.doc, s.sig.KeyID, what, id)
			}
		}
	}
	return ins, nil
}

// sbomCovers checks that doc lists every Debian package and Go module the
// build manifest records, at their versions.
func sbomCovers(doc *SPDXDocument, m *osimage.BuildManifest) error {
	have := map[string]bool{}
	for _, p := range doc.Packages {
		have[p.Name+"@"+p.VersionInfo] = true
	}
	for n, v := range m.Packages {
		if !have[n+"@"+v] {
			return fmt.Errorf("sbom lacks Debian package %s %s", n, v)
		}
	}
	for _, g := range m.GoPrograms {
		for _, mod := range append([]osimage.GoModule{g.Main}, g.Deps...) {
			if !have[mod.Path+"@"+mod.Version] {
				return fmt.Errorf("sbom lacks Go module %s %s of %s", mod.Path, mod.Version, g.Path)
			}
		}
	}
	return nil
}

// archDiff names, per architecture, the manifests of ins (v1 and V2)
// that differ from those the outputs make (local, of dirs), and the files
// of each output that differ from the pushed v1 manifest's layers, for
// the error message.
func archDiff(ins *Inspection, local v1.ImageIndex, dirs []string) string {
	im, err := local.IndexManifest()
	if err != nil {
		return err.Error()
	}
	made := map[string]map[string]string{} // arch -> kind -> digest
	for _, d := range im.Manifests {
		img, err := local.Image(d.Digest)
		if err != nil {
			return err.Error()
		}
		p := platformImage{desc: d, img: img}
		if made[p.arch()] == nil {
			made[p.arch()] = map[string]string{}
		}
		made[p.arch()][p.kind()] = d.Digest.String()
	}
	pushed := map[string][]InspectedManifest{}
	var archs []string
	for _, m := range ins.Manifests {
		a := m.Platform[strings.LastIndex(m.Platform, "/")+1:]
		if pushed[a] == nil {
			archs = append(archs, a)
		}
		pushed[a] = append(pushed[a], m)
	}
	var diffs []string
	for _, d := range dirs {
		m, err := osimage.ReadManifest(d)
		if err != nil {
			return err.Error()
		}
		a := m.Architecture
		if len(pushed[a]) == 0 {
			diffs = append(diffs, "no "+a+" image")
			continue
		}
		want := made[a]
		for _, p := range pushed[a] {
			switch w, ok := want[p.Kind]; {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s %s manifest %s is none %s makes", a, p.Kind, p.Digest, d))
			case w != p.Digest:
				diffs = append(diffs, fmt.Sprintf("%s %s manifest is %s, %s makes %s", a, p.Kind, p.Digest, d, w))
			}
		}
		for kind, w := range want {
			if !slices.ContainsFunc(pushed[a], func(p InspectedManifest) bool { return p.Kind == kind }) {
				diffs = append(diffs, fmt.Sprintf("%s has no %s manifest, %s makes %s", a, kind, d, w))
			}
		}
		diffs = append(diffs, layerDiff(pushed[a], d, m)...)
	}
	for _, a := range archs {
		if made[a] == nil {
			diffs = append(diffs, fmt.Sprintf("%s: the index has %d manifests no output makes", a, len(pushed[a])))
		}
	}
	if len(diffs) == 0 {
		return "the index's annotations or order differ"
	}
	return strings.Join(diffs, "; ")
}

// layerDiff names the artifacts of the output d (its build manifest m)
// whose digest differs from the layers of its pushed v1 manifest.
func layerDiff(pushed []InspectedManifest, d string, m *osimage.BuildManifest) []string {
	i := slices.IndexFunc(pushed, func(p InspectedManifest) bool { return p.Kind == KindV1 })
	if i < 0 {
		return nil
	}
	layers := map[string]string{}
	for _, l := range pushed[i].Layers {
		layers[l.Title] = l.Digest
	}
	var diffs []string
	for _, a := range m.Artifacts {
		if got := layers[a.Path]; got != "sha256:"+a.SHA256 {
			diffs = append(diffs, fmt.Sprintf("%s is %s, %s says sha256:%s", filepath.Join(d, a.Path), orDash(got), filepath.Join(d, osimage.ManifestFile), a.SHA256))
		}
	}
	return diffs
}
