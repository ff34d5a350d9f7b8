package publish_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/publish"
)

const testIndex = "sha256:1111111111111111111111111111111111111111111111111111111111111111"

// attestManifest is a build manifest with every component kind the SBOM
// lists.
func attestManifest() *osimage.BuildManifest {
	return &osimage.BuildManifest{
		Recipe: "hypervisor", Version: "1.2.0", Architecture: "amd64", SourceDateEpoch: 1735689600,
		OSRelease:      map[string]string{"ID": "debian", "VERSION_ID": "12"},
		Layers:         []string{"base", "dpservice"},
		ExcludedLayers: []string{"debug"},
		Packages:       map[string]string{"bash": "5.2.15-2+b13", "libc6": "2.36-9+deb12u14", "bsdutils": "1:2.38.1-5+deb12u3"},
		GoPrograms: []osimage.GoProgram{
			{Path: "/init", GoVersion: "go1.26.0", Main: osimage.GoModule{Path: "github.com/ironcore-dev/os-builder", Version: "(devel)"},
				Deps: []osimage.GoModule{{Path: "golang.org/x/sys", Version: "v0.47.0", Sum: "h1:abc="}}},
			{Path: "/usr/bin/metalnet", GoVersion: "go1.26.0", Main: osimage.GoModule{Path: "github.com/ironcore-dev/metalnet", Version: "v0.4.0", Sum: "h1:def="},
				Deps: []osimage.GoModule{{Path: "golang.org/x/sys", Version: "v0.47.0", Sum: "h1:abc="}}},
		},
		OCISources: []osimage.OCISource{{Image: "ghcr.io/ironcore-dev/dpservice:v0.3.16@sha256:" + strings.Repeat("ab", 32), Paths: []string{"/usr/local/bin/dpservice-bin"}}},
	}
}

// TestSBOM: the SPDX document lists the image, every Debian package with
// its version and purl, each Go program and every module it links (shared
// modules once), the OCI source by digest; it parses back, and every
// relationship names defined elements. Golden: testdata/sbom.golden.json.
func TestSBOM(t *testing.T) {
	m := attestManifest()
	b, err := publish.NewSBOM([]*osimage.BuildManifest{m}, testIndex, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, filepath.Join("testdata", "sbom.golden.json"), b)
	doc, err := publish.ParseSBOM(b)
	if err != nil {
		t.Fatal(err)
	}
	for prefix, want := range map[string]int{"pkg:deb/": 3, "pkg:golang/": 3, "pkg:oci/": 1} {
		if got := len(doc.PackagesWithPURL(prefix)); got != want {
			t.Errorf("%d %s packages, want %d", got, prefix, want)
		}
	}
	oci := doc.PackagesWithPURL("pkg:oci/")[0]
	if len(oci.Checksums) != 1 || oci.Checksums[0].ChecksumValue != strings.Repeat("ab", 32) {
		t.Errorf("OCI source checksums %+v", oci.Checksums)
	}
	again, _ := publish.NewSBOM([]*osimage.BuildManifest{m}, testIndex, "v1.0.0")
	if !bytes.Equal(b, again) {
		t.Error("the SBOM is not deterministic")
	}
}

// TestProvenance: the statement's subject is the index, the recipe and
// lock files are recorded by sha256, the commit as gitCommit, the builder
// by id and version; it parses back.
func TestProvenance(t *testing.T) {
	dir := t.TempDir()
	recipe := testutil.WriteFile(t, dir, "hypervisor.yaml", []byte("name: hypervisor\n"))
	lock := testutil.WriteFile(t, dir, "hypervisor.lock", []byte("lock\n"))
	b, err := publish.NewProvenance([]*osimage.BuildManifest{attestManifest()}, "registry.test/os-images/hypervisor", testIndex,
		publish.Provenance{Recipe: recipe, Lock: lock, SourceRepo: "git+https://example.test/os-builder", SourceCommit: "0123456789abcdef0123456789abcdef01234567", BuilderID: "https://example.test/run/1"}, "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	st, pred, err := publish.ParseProvenance(b)
	if err != nil {
		t.Fatal(err)
	}
	if st.Subject[0].Name != "registry.test/os-images/hypervisor" || "sha256:"+st.Subject[0].Digest["sha256"] != testIndex {
		t.Errorf("subject %+v", st.Subject)
	}
	if pred.RunDetails.Builder.ID != "https://example.test/run/1" || pred.RunDetails.Builder.Version["os-builder"] != "v1.0.0" {
		t.Errorf("builder %+v", pred.RunDetails.Builder)
	}
	deps := map[string]map[string]string{}
	for _, d := range pred.BuildDefinition.ResolvedDependencies {
		deps[d.Name+" "+d.URI] = d.Digest
	}
	for key, want := range map[string]string{
		"recipe:" + filepath.ToSlash(recipe) + " ": testutil.FileSHA256(t, recipe),
		"lock:" + filepath.ToSlash(lock) + " ":     testutil.FileSHA256(t, lock),
	} {
		if deps[key]["sha256"] != want {
			t.Errorf("%s: digest %v, want sha256 %s (deps %v)", key, deps[key], want, deps)
		}
	}
	if d := deps["source git+https://example.test/os-builder@0123456789abcdef0123456789abcdef01234567"]; d["gitCommit"] != "0123456789abcdef0123456789abcdef01234567" {
		t.Errorf("source: %v (deps %v)", d, deps)
	}
	if d := deps[" oci://ghcr.io/ironcore-dev/dpservice:v0.3.16@sha256:"+strings.Repeat("ab", 32)]; d["sha256"] != strings.Repeat("ab", 32) {
		t.Errorf("oci source: %v (deps %v)", d, deps)
	}
	if _, err := publish.NewProvenance([]*osimage.BuildManifest{attestManifest()}, "r", testIndex, publish.Provenance{Lock: filepath.Join(dir, "missing.lock")}, "v"); err == nil || !strings.Contains(err.Error(), "missing.lock") {
		t.Errorf("missing lock file: err = %v", err)
	}
}

func TestParseSBOMRejects(t *testing.T) {
	good, err := publish.NewSBOM([]*osimage.BuildManifest{attestManifest()}, testIndex, "v")
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	for _, tc := range []struct {
		name, want string
		doc        []byte
	}{
		{"not json", "sbom:", []byte("{")},
		{"version", "spdxVersion", edit(func(m map[string]any) { m["spdxVersion"] = "SPDX-2.2" })},
		{"no packages", "no packages", edit(func(m map[string]any) { m["packages"] = []any{} })},
		{"duplicate id", "defined twice", edit(func(m map[string]any) {
			p := m["packages"].([]any)
			p[1].(map[string]any)["SPDXID"] = p[0].(map[string]any)["SPDXID"]
		})},
		{"dangling relationship", "undefined element", edit(func(m map[string]any) {
			m["relationships"] = []any{map[string]any{"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", "relatedSpdxElement": "SPDXRef-nowhere"}}
		})},
		{"too big", "more than", make([]byte, 32<<20+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := publish.ParseSBOM(tc.doc); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestParseProvenanceRejects(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"not json", "[", "provenance:"},
		{"type", `{"_type":"x","predicateType":"https://slsa.dev/provenance/v1","subject":[{"digest":{"sha256":"` + strings.Repeat("a", 64) + `"}}],"predicate":{}}`, "_type"},
		{"predicate type", `{"_type":"https://in-toto.io/Statement/v1","predicateType":"x","subject":[],"predicate":{}}`, "predicateType"},
		{"no subject", `{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://slsa.dev/provenance/v1","subject":[],"predicate":{}}`, "no subject"},
		{"short digest", `{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://slsa.dev/provenance/v1","subject":[{"digest":{"sha256":"abc"}}],"predicate":{}}`, "64 lowercase hex"},
		{"no build type", `{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://slsa.dev/provenance/v1","subject":[{"digest":{"sha256":"` + strings.Repeat("a", 64) + `"}}],"predicate":{"runDetails":{"builder":{"id":"x"}}}}`, "buildType"},
		{"no builder", `{"_type":"https://in-toto.io/Statement/v1","predicateType":"https://slsa.dev/provenance/v1","subject":[{"digest":{"sha256":"` + strings.Repeat("a", 64) + `"}}],"predicate":{"buildDefinition":{"buildType":"t"}}}`, "builder.id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := publish.ParseProvenance([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// FuzzParseSBOM: SBOMs come back from registries; no input may panic the
// parser, and what it accepts has unique IDs and resolvable relationships.
func FuzzParseSBOM(f *testing.F) {
	f.Add(compactSBOM(f))
	f.Add([]byte(`{"spdxVersion":"SPDX-2.3","SPDXID":"SPDXRef-DOCUMENT","packages":[{"SPDXID":"SPDXRef-a","name":"a"}]}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := publish.ParseSBOM(b)
		if err != nil {
			return
		}
		ids := map[string]bool{}
		for _, p := range doc.Packages {
			if ids[p.SPDXID] || p.Name == "" {
				t.Fatalf("accepted %+v", p)
			}
			ids[p.SPDXID] = true
		}
	})
}

// compactSBOM is a small SBOM with one component of each kind, compact
// JSON: small seeds keep each exec and minimization cheap.
func compactSBOM(f *testing.F) []byte {
	m := attestManifest()
	m.Packages = map[string]string{"bash": "5.2"}
	m.GoPrograms = m.GoPrograms[1:]
	m.GoPrograms[0].Deps = nil
	b, err := publish.NewSBOM([]*osimage.BuildManifest{m}, testIndex, "v")
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzParseProvenance: the same for provenance statements.
func FuzzParseProvenance(f *testing.F) {
	good, _ := publish.NewProvenance([]*osimage.BuildManifest{attestManifest()}, "r", testIndex, publish.Provenance{SourceCommit: "abc"}, "v")
	var buf bytes.Buffer
	if err := json.Compact(&buf, good); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"_type":"https://in-toto.io/Statement/v1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, pred, err := publish.ParseProvenance(b)
		if err != nil {
			return
		}
		if len(st.Subject) == 0 || len(st.Subject[0].Digest["sha256"]) != 64 || pred.RunDetails.Builder.ID == "" {
			t.Fatalf("accepted %+v", st)
		}
	})
}

// TestVerifyRefuses: `builder inspect --verify` (publish.Verify) fails for
// an index that is not what the output makes (naming the layer that
// differs) and for one pushed without attestations.
func TestVerifyRefuses(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	out := outputDir(t, "amd64")
	ref := host + "/verify/img:1"
	if _, err := publish.Push(ctx, out, ref, insecure); err != nil {
		t.Fatal(err)
	}
	if _, err := publish.Verify(ctx, ref, []string{out}, insecure); err != nil {
		t.Fatalf("verify of a fresh push: %v", err)
	}

	other := outputDir(t, "amd64")
	if err := os.WriteFile(filepath.Join(other, "uki.efi"), []byte("another uki"), 0o644); err != nil {
		t.Fatal(err)
	}
	rewriteManifest(t, other)
	if _, err := publish.Verify(ctx, ref, []string{other}, insecure); err == nil || !strings.Contains(err.Error(), "uki.efi is sha256:") {
		t.Errorf("verify against another output: err = %v, want the differing uki.efi named", err)
	}

	// The same index without referrers, as pushed by a tool that attaches
	// none.
	bare := host + "/verify/bare:1"
	idx, err := osimage.NewIndexFromDirs(out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(bare, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	if _, err := publish.Verify(ctx, bare, []string{out}, insecure); err == nil || !strings.Contains(err.Error(), "no application/spdx+json or application/vnd.in-toto+json referrer") {
		t.Errorf("verify without attestations: err = %v", err)
	}
}

// rewriteManifest recomputes manifest.json's artifact digests and sizes
// after a test changed a file.
func rewriteManifest(t *testing.T, dir string) {
	t.Helper()
	m, err := osimage.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range m.Artifacts {
		p := filepath.Join(dir, a.Path)
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		m.Artifacts[i].Size, m.Artifacts[i].SHA256 = fi.Size(), testutil.FileSHA256(t, p)
	}
	b, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, osimage.ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReferrersFallbackTag: docker-registry (distribution 2.8) has no
// referrers API, so the push keeps the OCI fallback tag sha256-<index
// hex>: an index listing the SBOM and provenance manifests with their
// artifactType. Each is an OCI artifact manifest whose subject is the
// index descriptor, with the empty config. Pushing again adds nothing.
func TestReferrersFallbackTag(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	out := outputDir(t, "amd64")
	ref := host + "/fallback/img:1"
	digest, err := publish.Push(ctx, out, ref, insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publish.Push(ctx, out, ref, insecure); err != nil {
		t.Fatal(err)
	}
	repo, err := name.NewRepository(host+"/fallback/img", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idxDesc, err := remote.Get(repo.Tag("1"))
	if err != nil {
		t.Fatal(err)
	}
	fb, err := remote.Index(repo.Tag("sha256-" + digest.Hex))
	if err != nil {
		t.Fatalf("fallback tag: %v", err)
	}
	im, err := fb.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]bool{}
	for _, d := range im.Manifests {
		types[d.ArtifactType] = true
		img, err := remote.Image(repo.Digest(d.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		mf, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if mf.Subject == nil || mf.Subject.Digest != digest || mf.Subject.Size != idxDesc.Size || mf.Subject.MediaType != idxDesc.MediaType {
			t.Errorf("%s: subject %+v, want the index %s (%d bytes, %s)", d.ArtifactType, mf.Subject, digest, idxDesc.Size, idxDesc.MediaType)
		}
		if mf.ArtifactType != d.ArtifactType || mf.Config.MediaType != "application/vnd.oci.empty.v1+json" || mf.Config.Size != 2 || len(mf.Layers) != 1 {
			t.Errorf("%s: manifest %+v", d.ArtifactType, mf)
		}
	}
	if len(im.Manifests) != 2 || !types[publish.ArtifactTypeSPDX] || !types[publish.ArtifactTypeInToto] {
		t.Errorf("fallback index lists %+v, want one SBOM and one provenance", im.Manifests)
	}
}
