package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/ironcore-dev/os-builder/osimage"
)

// Inspection describes what a reference points at, for `builder inspect`.
type Inspection struct {
	Reference string              `json:"reference"`
	Digest    string              `json:"digest"`
	MediaType string              `json:"mediaType"`
	Manifests []InspectedManifest `json:"manifests"`
	// Referrers are the manifests attached to the digest (SBOM,
	// provenance); registries only, layouts carry none.
	Referrers []Referrer `json:"referrers,omitempty"`
}

// KindV1 is InspectedManifest.Kind of a v1 manifest (every artifact in
// one manifest); V2 manifests have their kind (UKI, EFI, Disk).
const KindV1 = "v1"

// InspectedManifest is one manifest of the index and its boot identity.
type InspectedManifest struct {
	Platform     string                `json:"platform,omitempty"`
	Kind         string                `json:"kind"`
	Digest       string                `json:"digest"`
	ArtifactType string                `json:"artifactType,omitempty"`
	Recipe       string                `json:"recipe,omitempty"`
	Version      string                `json:"version,omitempty"`
	Created      string                `json:"created,omitempty"`
	BootMethods  []osimage.BootMethod  `json:"bootMethods"`
	DefaultBoot  osimage.BootMethod    `json:"defaultBoot,omitempty"`
	InstallModes []osimage.InstallMode `json:"installModes"`
	Cmdline      string                `json:"cmdline,omitempty"`
	SecureBoot   string                `json:"secureBoot,omitempty"`
	Layers       []InspectedLayer      `json:"layers"`
}

// InspectedLayer is one layer of an image.
type InspectedLayer struct {
	Title     string `json:"title,omitempty"`
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	Boot      string `json:"boot,omitempty"`
}

// Inspect reads ref (registry reference or oci:PATH[:TAG]) and describes
// every image it holds. Only manifests and configs are fetched, each
// checked against its descriptor (size bounded first) before it is used.
func Inspect(ctx context.Context, ref string, opts Options) (*Inspection, error) {
	r, err := resolve(ctx, ref, opts)
	if err != nil {
		return nil, err
	}
	ins := &Inspection{Reference: r.ref, Digest: r.digest.String(), MediaType: string(r.mediaType)}
	for _, p := range r.images {
		id, err := osimage.ReadIdentity(p.img)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.desc.Digest, err)
		}
		mf, err := p.img.Manifest()
		if err != nil {
			return nil, err
		}
		im := InspectedManifest{
			Kind:         p.kind(),
			Digest:       p.desc.Digest.String(),
			ArtifactType: id.ArtifactType,
			Recipe:       id.Recipe,
			Version:      id.Version,
			Created:      id.Created,
			BootMethods:  id.Methods,
			DefaultBoot:  id.Default,
			InstallModes: id.InstallModes,
			Cmdline:      id.Cmdline,
			SecureBoot:   id.SecureBoot,
			Layers:       []InspectedLayer{},
		}
		if pl := p.desc.Platform; pl != nil {
			im.Platform = pl.OS + "/" + pl.Architecture
			if pl.Variant != "" {
				im.Platform += "/" + pl.Variant
			}
		} else if id.Architecture != "" {
			im.Platform = "linux/" + id.Architecture
		}
		for _, l := range mf.Layers {
			im.Layers = append(im.Layers, InspectedLayer{
				Title:     l.Annotations[osimage.AnnotationTitle],
				MediaType: string(l.MediaType),
				Digest:    l.Digest.String(),
				Size:      l.Size,
				Boot:      l.Annotations[osimage.AnnotationArtifactBoot],
			})
		}
		ins.Manifests = append(ins.Manifests, im)
	}
	if r.remote != nil {
		if ins.Referrers, err = listReferrers(ctx, r.remote.Context(), r.digest, opts); err != nil {
			return nil, err
		}
	}
	return ins, nil
}

// WriteInspection renders ins as indented JSON or as a human-readable table.
func WriteInspection(w io.Writer, ins *Inspection, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(ins)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Reference:\t%s\n", ins.Reference)
	fmt.Fprintf(tw, "Digest:\t%s\n", ins.Digest)
	fmt.Fprintf(tw, "Media type:\t%s\n", ins.MediaType)
	for _, m := range ins.Manifests {
		fmt.Fprintf(tw, "\nPlatform:\t%s\n", orDash(m.Platform))
		fmt.Fprintf(tw, "  Manifest:\t%s (%s)\n", m.Digest, m.Kind)
		fmt.Fprintf(tw, "  Artifact type:\t%s\n", orDash(m.ArtifactType))
		fmt.Fprintf(tw, "  Recipe:\t%s\n", orDash(strings.TrimSpace(m.Recipe+" "+m.Version)))
		fmt.Fprintf(tw, "  Created:\t%s\n", orDash(m.Created))
		var methods []string
		for _, b := range m.BootMethods {
			s := string(b)
			if b == m.DefaultBoot {
				s += " (default)"
			}
			methods = append(methods, s)
		}
		fmt.Fprintf(tw, "  Boot methods:\t%s\n", orDash(strings.Join(methods, ", ")))
		var modes []string
		for _, im := range m.InstallModes {
			modes = append(modes, string(im))
		}
		fmt.Fprintf(tw, "  Install modes:\t%s\n", orDash(strings.Join(modes, ", ")))
		fmt.Fprintf(tw, "  Cmdline:\t%s\n", orDash(m.Cmdline))
		if m.SecureBoot != "" {
			fmt.Fprintf(tw, "  Secure Boot:\t%s\n", m.SecureBoot)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		lw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(lw, "  FILE\tMEDIA TYPE\tSIZE\tDIGEST\tBOOT\n")
		for _, l := range m.Layers {
			fmt.Fprintf(lw, "  %s\t%s\t%s\t%s\t%s\n", orDash(l.Title), l.MediaType, humanSize(l.Size), shortDigest(l.Digest), orDash(l.Boot))
		}
		if err := lw.Flush(); err != nil {
			return err
		}
	}
	if len(ins.Referrers) > 0 {
		rw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(rw, "\nReferrers:\n  ARTIFACT TYPE\tSIZE\tDIGEST\n")
		for _, r := range ins.Referrers {
			fmt.Fprintf(rw, "  %s\t%s\t%s\n", orDash(r.ArtifactType), humanSize(r.Size), r.Digest)
		}
		if err := rw.Flush(); err != nil {
			return err
		}
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortDigest keeps the algorithm and 12 hex digits, like container tools.
func shortDigest(d string) string {
	alg, hex, ok := strings.Cut(d, ":")
	if !ok || len(hex) <= 12 {
		return d
	}
	return alg + ":" + hex[:12]
}

func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}
