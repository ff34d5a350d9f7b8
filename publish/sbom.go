package publish

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/ironcore-dev/os-builder/osimage"
)

// ArtifactTypeSPDX is the artifactType (and layer media type) of the SBOM
// referrer: an SPDX 2.3 JSON document.
const ArtifactTypeSPDX = "application/spdx+json"

// SPDXDocument is the part of an SPDX 2.3 JSON document this package
// writes and checks.
type SPDXDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      SPDXCreationInfo   `json:"creationInfo"`
	DocumentDescribes []string           `json:"documentDescribes"`
	Packages          []SPDXPackage      `json:"packages"`
	Relationships     []SPDXRelationship `json:"relationships"`
}

// SPDXCreationInfo says when and by what the document was made.
type SPDXCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

// SPDXPackage is one component: the image, a Debian package, a Go module,
// a Go program or an OCI source image.
type SPDXPackage struct {
	SPDXID                string            `json:"SPDXID"`
	Name                  string            `json:"name"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	Checksums             []SPDXChecksum    `json:"checksums,omitempty"`
	ExternalRefs          []SPDXExternalRef `json:"externalRefs,omitempty"`
	Comment               string            `json:"comment,omitempty"`
}

// SPDXChecksum is a package checksum.
type SPDXChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

// SPDXExternalRef is a package URL (purl) of a package.
type SPDXExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

// SPDXRelationship links two elements.
type SPDXRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// PURL prefixes the SBOM uses for its component kinds.
const (
	purlDeb    = "pkg:deb/"
	purlGolang = "pkg:golang/"
	purlOCI    = "pkg:oci/"
)

// NewSBOM describes what the images built from manifests contain: per
// architecture, the image, its Debian packages with versions, the Go
// programs with every module linked into them, and the OCI images files
// were taken from, pinned by digest. index is the digest the SBOM is
// attached to; the output is deterministic (no wall clock: the time is the
// build's SOURCE_DATE_EPOCH).
func NewSBOM(manifests []*osimage.BuildManifest, index string, builderVersion string) ([]byte, error) {
	if len(manifests) == 0 {
		return nil, errors.New("sbom: no build manifest")
	}
	first := manifests[0]
	doc := SPDXDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              first.Recipe + "-" + first.Version,
		DocumentNamespace: "https://github.com/ironcore-dev/os-builder/spdx/" + url.PathEscape(first.Recipe) + "/" + url.PathEscape(first.Version) + "/" + strings.TrimPrefix(index, "sha256:"),
		CreationInfo: SPDXCreationInfo{
			Created:  time.Unix(first.SourceDateEpoch, 0).UTC().Format(time.RFC3339),
			Creators: []string{"Tool: os-builder-" + builderVersion},
		},
	}
	ids := map[string]int{}
	newID := func(kind, name string) string {
		base := "SPDXRef-" + kind + "-" + spdxIDUnsafe.ReplaceAllString(name, "-")
		ids[base]++
		if n := ids[base]; n > 1 {
			return fmt.Sprintf("%s-%d", base, n)
		}
		return base
	}
	rel := func(from, typ, to string) {
		doc.Relationships = append(doc.Relationships, SPDXRelationship{from, typ, to})
	}
	modules := map[string]string{} // path@version -> SPDXID, shared across programs
	for _, m := range manifests {
		imgID := newID("Image", m.Recipe+"-"+m.Architecture)
		doc.DocumentDescribes = append(doc.DocumentDescribes, imgID)
		rel("SPDXRef-DOCUMENT", "DESCRIBES", imgID)
		doc.Packages = append(doc.Packages, SPDXPackage{
			SPDXID: imgID, Name: m.Recipe, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
			PrimaryPackagePurpose: "OPERATING-SYSTEM",
			Comment:               "architecture " + m.Architecture + "; layers " + strings.Join(m.Layers, ", "),
		})
		distro := ""
		if id, v := m.OSRelease["ID"], m.OSRelease["VERSION_ID"]; id != "" && v != "" {
			distro = "&distro=" + url.QueryEscape(id+"-"+v)
		}
		names := make([]string, 0, len(m.Packages))
		for n := range m.Packages {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			v := m.Packages[n]
			id := newID("deb", n+"-"+m.Architecture)
			doc.Packages = append(doc.Packages, SPDXPackage{
				SPDXID: id, Name: n, VersionInfo: v, DownloadLocation: "NOASSERTION",
				PrimaryPackagePurpose: "LIBRARY",
				ExternalRefs: []SPDXExternalRef{purl(purlDeb + "debian/" + url.PathEscape(n) + "@" + url.PathEscape(v) +
					"?arch=" + url.QueryEscape(m.Architecture) + distro)},
			})
			rel(imgID, "CONTAINS", id)
		}
		for _, p := range m.GoPrograms {
			pid := newID("go-program", m.Architecture+"-"+p.Path)
			doc.Packages = append(doc.Packages, SPDXPackage{
				SPDXID: pid, Name: p.Path, VersionInfo: p.Main.Version, DownloadLocation: "NOASSERTION",
				PrimaryPackagePurpose: "APPLICATION",
				Comment:               "main module " + p.Main.Path + ", built with " + p.GoVersion,
			})
			rel(imgID, "CONTAINS", pid)
			for _, mod := range append([]osimage.GoModule{p.Main}, p.Deps...) {
				key := mod.Path + "@" + mod.Version
				mid, ok := modules[key]
				if !ok {
					mid = newID("go", key)
					modules[key] = mid
					pkg := SPDXPackage{
						SPDXID: mid, Name: mod.Path, VersionInfo: mod.Version, DownloadLocation: "NOASSERTION",
						PrimaryPackagePurpose: "LIBRARY",
						ExternalRefs:          []SPDXExternalRef{purl(purlGolang + mod.Path + "@" + url.PathEscape(mod.Version))},
					}
					if mod.Sum != "" {
						pkg.Comment = "go.sum " + mod.Sum
					}
					doc.Packages = append(doc.Packages, pkg)
				}
				rel(pid, "DEPENDS_ON", mid)
			}
		}
		for _, s := range m.OCISources {
			d, err := name.NewDigest(s.Image)
			if err != nil {
				return nil, fmt.Errorf("sbom: oci source %q: %w", s.Image, err)
			}
			alg, hex, _ := strings.Cut(d.DigestStr(), ":")
			repo := d.Context()
			last := repo.RepositoryStr()[strings.LastIndex(repo.RepositoryStr(), "/")+1:]
			id := newID("oci", repo.String()+"-"+hex[:12])
			doc.Packages = append(doc.Packages, SPDXPackage{
				SPDXID: id, Name: repo.String(), VersionInfo: d.DigestStr(), DownloadLocation: "NOASSERTION",
				PrimaryPackagePurpose: "CONTAINER",
				Checksums:             []SPDXChecksum{{Algorithm: strings.ToUpper(alg), ChecksumValue: hex}},
				ExternalRefs: []SPDXExternalRef{purl(purlOCI + last + "@" + url.QueryEscape(d.DigestStr()) +
					"?repository_url=" + url.QueryEscape(repo.Name()))},
				Comment: "files taken: " + strings.Join(s.Paths, ", "),
			})
			rel(imgID, "CONTAINS", id)
		}
	}
	return json.MarshalIndent(doc, "", " ")
}

var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func purl(locator string) SPDXExternalRef {
	return SPDXExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: locator}
}

// maxAttestationSize bounds an SBOM or provenance blob read back from a
// registry; the hypervisor's SBOM is a few hundred KiB.
const maxAttestationSize = 32 << 20

// ParseSBOM reads an SPDX 2.3 JSON document and checks what consumers rely
// on: the version, unique element IDs, packages with names, and
// relationships between elements the document defines.
func ParseSBOM(b []byte) (*SPDXDocument, error) {
	if len(b) > maxAttestationSize {
		return nil, fmt.Errorf("sbom: %d bytes, more than %d", len(b), maxAttestationSize)
	}
	var doc SPDXDocument
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("sbom: %w", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		return nil, fmt.Errorf("sbom: spdxVersion %q, want SPDX-2.3", doc.SPDXVersion)
	}
	if doc.SPDXID != "SPDXRef-DOCUMENT" {
		return nil, fmt.Errorf("sbom: document SPDXID %q, want SPDXRef-DOCUMENT", doc.SPDXID)
	}
	if len(doc.Packages) == 0 {
		return nil, errors.New("sbom: no packages")
	}
	seen := map[string]bool{doc.SPDXID: true}
	for i, p := range doc.Packages {
		if !strings.HasPrefix(p.SPDXID, "SPDXRef-") {
			return nil, fmt.Errorf("sbom: packages[%d]: SPDXID %q does not start with SPDXRef-", i, p.SPDXID)
		}
		if seen[p.SPDXID] {
			return nil, fmt.Errorf("sbom: packages[%d]: SPDXID %q defined twice", i, p.SPDXID)
		}
		seen[p.SPDXID] = true
		if p.Name == "" {
			return nil, fmt.Errorf("sbom: packages[%d] (%s): no name", i, p.SPDXID)
		}
	}
	for i, r := range doc.Relationships {
		if !seen[r.SPDXElementID] || !seen[r.RelatedSPDXElement] {
			return nil, fmt.Errorf("sbom: relationships[%d]: %s %s %s names an undefined element", i, r.SPDXElementID, r.RelationshipType, r.RelatedSPDXElement)
		}
	}
	for _, id := range doc.DocumentDescribes {
		if !seen[id] {
			return nil, fmt.Errorf("sbom: documentDescribes names undefined %s", id)
		}
	}
	return &doc, nil
}

// PackagesWithPURL returns the packages whose purl starts with prefix
// ("pkg:deb/", "pkg:golang/", "pkg:oci/").
func (d *SPDXDocument) PackagesWithPURL(prefix string) []SPDXPackage {
	var out []SPDXPackage
	for _, p := range d.Packages {
		for _, r := range p.ExternalRefs {
			if r.ReferenceType == "purl" && strings.HasPrefix(r.ReferenceLocator, prefix) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}
