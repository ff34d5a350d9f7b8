package publish

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/ironcore-dev/os-builder/osimage"
)

// The provenance referrer: an in-toto v1 Statement with a SLSA v1
// provenance predicate.
const (
	ArtifactTypeInToto    = "application/vnd.in-toto+json"
	InTotoStatementType   = "https://in-toto.io/Statement/v1"
	SLSAProvenanceType    = "https://slsa.dev/provenance/v1"
	AnnotationPredicate   = "in-toto.io/predicate-type"
	ProvenanceBuildType   = "https://github.com/ironcore-dev/os-builder/buildtypes/recipe/v1"
	DefaultBuilderID      = "https://github.com/ironcore-dev/os-builder"
	maxProvenanceFileSize = 16 << 20 // recipe and lock files are read to hash them
)

// Provenance names what a build came from, beyond its manifest.json: the
// recipe and lock files, the source revision and the builder. Empty fields
// are left out of the statement.
type Provenance struct {
	// Recipe and Lock are file paths; their sha256 digests are recorded.
	Recipe, Lock string
	// SourceRepo is the source repository URI (e.g. git+https://...);
	// SourceCommit the full commit hash it was built from.
	SourceRepo, SourceCommit string
	// BuilderID identifies who ran the build (a CI run URL, say); default
	// DefaultBuilderID.
	BuilderID string
}

// Statement is an in-toto v1 Statement.
type Statement struct {
	Type          string          `json:"_type"`
	Subject       []Subject       `json:"subject"`
	PredicateType string          `json:"predicateType"`
	Predicate     json.RawMessage `json:"predicate"`
}

// Subject is what a statement is about, by digest.
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// SLSAProvenance is the SLSA v1 provenance predicate.
type SLSAProvenance struct {
	BuildDefinition BuildDefinition `json:"buildDefinition"`
	RunDetails      RunDetails      `json:"runDetails"`
}

// BuildDefinition is what was built and from what.
type BuildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   map[string]any       `json:"externalParameters"`
	InternalParameters   map[string]any       `json:"internalParameters,omitempty"`
	ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies,omitempty"`
}

// ResourceDescriptor names an input by URI and/or digest.
type ResourceDescriptor struct {
	Name   string            `json:"name,omitempty"`
	URI    string            `json:"uri,omitempty"`
	Digest map[string]string `json:"digest,omitempty"`
}

// RunDetails is who built it.
type RunDetails struct {
	Builder struct {
		ID      string            `json:"id"`
		Version map[string]string `json:"version,omitempty"`
	} `json:"builder"`
}

// BuilderVersion is this program's module version and VCS revision, as
// its build info records them ("(devel)" for a plain go build).
func BuilderVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" {
		v += "+" + rev + dirty
	}
	return v
}

// NewProvenance writes the statement for the index pushed to repo with
// digest index, built from manifests.
func NewProvenance(manifests []*osimage.BuildManifest, repo, index string, p Provenance, builderVersion string) ([]byte, error) {
	if len(manifests) == 0 {
		return nil, errors.New("provenance: no build manifest")
	}
	alg, hexDigest, ok := strings.Cut(index, ":")
	if !ok {
		return nil, fmt.Errorf("provenance: subject digest %q", index)
	}
	m := manifests[0]
	var archs []string
	for _, bm := range manifests {
		archs = append(archs, bm.Architecture)
	}
	ext := map[string]any{
		"recipe":        map[string]any{"name": m.Recipe, "version": m.Version},
		"architectures": archs,
	}
	if len(m.ExcludedLayers) > 0 {
		ext["excludedLayers"] = m.ExcludedLayers
	}
	var deps []ResourceDescriptor
	if p.SourceCommit != "" {
		uri := p.SourceRepo
		if uri != "" {
			uri += "@" + p.SourceCommit
		}
		deps = append(deps, ResourceDescriptor{Name: "source", URI: uri, Digest: map[string]string{"gitCommit": p.SourceCommit}})
	}
	for _, f := range []struct{ role, path string }{{"recipe", p.Recipe}, {"lock", p.Lock}} {
		if f.path == "" {
			continue
		}
		sum, err := fileSHA256(f.path)
		if err != nil {
			return nil, fmt.Errorf("provenance: %s file: %w", f.role, err)
		}
		ext[f.role+"File"] = filepath.ToSlash(f.path)
		deps = append(deps, ResourceDescriptor{Name: f.role + ":" + filepath.ToSlash(f.path), Digest: map[string]string{"sha256": sum}})
	}
	for _, bm := range manifests {
		for _, s := range bm.OCISources {
			_, d, _ := strings.Cut(s.Image, "@")
			a, h, _ := strings.Cut(d, ":")
			deps = append(deps, ResourceDescriptor{URI: "oci://" + s.Image, Digest: map[string]string{a: h}})
		}
		for _, g := range bm.GoPrograms {
			deps = append(deps, ResourceDescriptor{Name: "go:" + bm.Architecture + ":" + g.Path, URI: "pkg:golang/" + g.Main.Path + "@" + g.Main.Version})
		}
	}
	pred := SLSAProvenance{BuildDefinition: BuildDefinition{
		BuildType:            ProvenanceBuildType,
		ExternalParameters:   ext,
		InternalParameters:   map[string]any{"sourceDateEpoch": m.SourceDateEpoch},
		ResolvedDependencies: deps,
	}}
	pred.RunDetails.Builder.ID = p.BuilderID
	if pred.RunDetails.Builder.ID == "" {
		pred.RunDetails.Builder.ID = DefaultBuilderID
	}
	pred.RunDetails.Builder.Version = map[string]string{"os-builder": builderVersion}
	raw, err := json.Marshal(pred)
	if err != nil {
		return nil, err
	}
	st := Statement{
		Type:          InTotoStatementType,
		Subject:       []Subject{{Name: repo, Digest: map[string]string{alg: hexDigest}}},
		PredicateType: SLSAProvenanceType,
		Predicate:     raw,
	}
	return json.MarshalIndent(st, "", " ")
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, maxProvenanceFileSize+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if n > maxProvenanceFileSize {
		return "", fmt.Errorf("%s: larger than %d bytes", path, maxProvenanceFileSize)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ParseProvenance reads an in-toto v1 Statement with a SLSA v1 provenance
// predicate and checks its shape: the types, at least one subject with a
// sha256 digest, a build type and a builder id.
func ParseProvenance(b []byte) (*Statement, *SLSAProvenance, error) {
	if len(b) > maxAttestationSize {
		return nil, nil, fmt.Errorf("provenance: %d bytes, more than %d", len(b), maxAttestationSize)
	}
	var st Statement
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, nil, fmt.Errorf("provenance: %w", err)
	}
	if st.Type != InTotoStatementType {
		return nil, nil, fmt.Errorf("provenance: _type %q, want %s", st.Type, InTotoStatementType)
	}
	if st.PredicateType != SLSAProvenanceType {
		return nil, nil, fmt.Errorf("provenance: predicateType %q, want %s", st.PredicateType, SLSAProvenanceType)
	}
	if len(st.Subject) == 0 {
		return nil, nil, errors.New("provenance: no subject")
	}
	for i, s := range st.Subject {
		if h := s.Digest["sha256"]; len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
			return nil, nil, fmt.Errorf("provenance: subject[%d] %q: sha256 digest %q is not 64 lowercase hex digits", i, s.Name, h)
		}
	}
	var pred SLSAProvenance
	if err := json.Unmarshal(st.Predicate, &pred); err != nil {
		return nil, nil, fmt.Errorf("provenance: predicate: %w", err)
	}
	if pred.BuildDefinition.BuildType == "" {
		return nil, nil, errors.New("provenance: predicate.buildDefinition.buildType is empty")
	}
	if pred.RunDetails.Builder.ID == "" {
		return nil, nil, errors.New("provenance: predicate.runDetails.builder.id is empty")
	}
	return &st, &pred, nil
}
