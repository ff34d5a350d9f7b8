package publish

import (
	"context"
	"fmt"
	"strings"

	"github.com/ironcore-dev/os-builder/osimage"
)

// Verify checks that ref holds exactly the image Push makes of the output
// directories dirs, and, for a registry, that the SBOM and provenance are
// attached and describe it. Images are reproducible, so the index digest
// computed from dirs (from their manifest.json digests; no artifact is
// read) must equal the pushed one: any manifest, config or layer that
// differs shows, and is named. It returns the inspection of ref.
func Verify(ctx context.Context, ref string, dirs []string, opts Options) (*Inspection, error) {
	ins, err := Inspect(ctx, ref, opts)
	if err != nil {
		return nil, err
	}
	local, err := osimage.NewIndexFromDirs(dirs...)
	if err != nil {
		return nil, err
	}
	want, err := local.Digest()
	if err != nil {
		return nil, err
	}
	if ins.Digest != want.String() {
		return ins, fmt.Errorf("%s is %s, the outputs %s make %s: %s", ref, ins.Digest, strings.Join(dirs, ", "), want, layerDiff(ins, dirs))
	}
	r, err := resolve(ctx, ref, opts)
	if err != nil {
		return nil, err
	}
	if r.remote == nil {
		return ins, nil
	}
	var manifests []*osimage.BuildManifest
	for _, d := range dirs {
		m, err := osimage.ReadManifest(d)
		if err != nil {
			return nil, err
		}
		manifests = append(manifests, m)
	}
	found := map[string]bool{}
	for _, rf := range ins.Referrers {
		switch rf.ArtifactType {
		case ArtifactTypeSPDX, ArtifactTypeInToto:
		default:
			continue
		}
		b, err := fetchAttestation(ctx, r.remote.Context(), rf, r.digest, opts)
		if err != nil {
			return ins, err
		}
		if rf.ArtifactType == ArtifactTypeSPDX {
			doc, err := ParseSBOM(b)
			if err != nil {
				return ins, fmt.Errorf("%s: referrer %s: %w", ref, rf.Digest, err)
			}
			if err := sbomCovers(doc, manifests); err != nil {
				return ins, fmt.Errorf("%s: referrer %s: %w", ref, rf.Digest, err)
			}
		} else {
			st, _, err := ParseProvenance(b)
			if err != nil {
				return ins, fmt.Errorf("%s: referrer %s: %w", ref, rf.Digest, err)
			}
			if got := "sha256:" + st.Subject[0].Digest["sha256"]; got != ins.Digest {
				return ins, fmt.Errorf("%s: provenance %s is about %s, not %s", ref, rf.Digest, got, ins.Digest)
			}
		}
		found[rf.ArtifactType] = true
	}
	for _, t := range []string{ArtifactTypeSPDX, ArtifactTypeInToto} {
		if !found[t] {
			return ins, fmt.Errorf("%s: no %s referrer attached to %s", ref, t, ins.Digest)
		}
	}
	return ins, nil
}

// sbomCovers checks that doc lists every Debian package and Go module the
// build manifests record, at their versions.
func sbomCovers(doc *SPDXDocument, manifests []*osimage.BuildManifest) error {
	have := map[string]bool{}
	for _, p := range doc.Packages {
		have[p.Name+"@"+p.VersionInfo] = true
	}
	for _, m := range manifests {
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
	}
	return nil
}

// layerDiff names the layers whose digest differs between ins and the
// images of dirs, for the error message.
func layerDiff(ins *Inspection, dirs []string) string {
	var diffs []string
	for _, d := range dirs {
		m, err := osimage.ReadManifest(d)
		if err != nil {
			return err.Error()
		}
		var im *InspectedManifest
		for i := range ins.Manifests {
			if strings.HasSuffix(ins.Manifests[i].Platform, "/"+m.Architecture) {
				im = &ins.Manifests[i]
			}
		}
		if im == nil {
			diffs = append(diffs, "no "+m.Architecture+" image")
			continue
		}
		pushed := map[string]string{}
		for _, l := range im.Layers {
			pushed[l.Title] = l.Digest
		}
		for _, a := range m.Artifacts {
			if got := pushed[a.Path]; got != "sha256:"+a.SHA256 {
				diffs = append(diffs, fmt.Sprintf("%s is %s, manifest.json says sha256:%s", a.Path, orDash(got), a.SHA256))
			}
		}
	}
	if len(diffs) == 0 {
		return "manifest, config or annotations differ"
	}
	return strings.Join(diffs, "; ")
}
