package ocistore

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

func platformImage(t *testing.T, arch string) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer([]byte("layer for "+arch), types.OCIUncompressedLayer))
	if err != nil {
		t.Fatal(err)
	}
	return testutil.LinuxImage(t, img, arch, nil)
}

// multiArch writes a layout holding one index of an amd64 and an arm64 image.
func multiArch(t *testing.T) (string, name.Digest, map[string]v1.Image) {
	t.Helper()
	imgs := map[string]v1.Image{"amd64": platformImage(t, "amd64"), "arm64": platformImage(t, "arm64")}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range []string{"amd64", "arm64"} {
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: imgs[arch],
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	dir := t.TempDir()
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendIndex(idx); err != nil {
		t.Fatal(err)
	}
	d, _ := idx.Digest()
	ref, _ := name.NewDigest("ghcr.io/ironcore-dev/tools@" + d.String())
	return dir, ref, imgs
}

func TestImportIndex(t *testing.T) {
	src, ref, imgs := multiArch(t)
	st, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Import(ref, src); err != nil {
		t.Fatal(err)
	}
	for arch, want := range imgs {
		img, err := st.Image(ref, v1.Platform{OS: "linux", Architecture: arch})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := img.Digest(); got != mustDigest(t, want) {
			t.Errorf("%s: %s, want %s", arch, got, mustDigest(t, want))
		}
	}
	if _, err := st.Image(ref, v1.Platform{OS: "linux", Architecture: "riscv64"}); err == nil {
		t.Error("found an image for a platform the index lacks")
	}

	// A child's layer changed in the source: the whole import is refused.
	l, _ := imgs["arm64"].Layers()
	ld, _ := l[0].Digest()
	p := filepath.Join(src, "blobs", ld.Algorithm, ld.Hex)
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, []byte("layer for arm65"), 0o644); err != nil {
		t.Fatal(err)
	}
	st2, _ := Open(t.TempDir())
	if _, err := st2.Import(ref, src); !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("err = %v, want a digest mismatch", err)
	}
	if _, err := st2.Image(ref, v1.Platform{OS: "linux", Architecture: "amd64"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("refused import left the index recorded: %v", err)
	}
}

// TestImportConcurrent: imports running at once (two builders sharing a
// cache) each keep their entry in index.json.
func TestImportConcurrent(t *testing.T) {
	dir := t.TempDir()
	var refs []name.Digest
	var srcs []string
	for _, arch := range []string{"amd64", "arm64", "ppc64le", "s390x"} {
		img := platformImage(t, arch)
		src := t.TempDir()
		lp, _ := layout.Write(src, empty.Index)
		if err := lp.AppendImage(img); err != nil {
			t.Fatal(err)
		}
		ref, _ := name.NewDigest("ghcr.io/x/" + arch + "@" + mustDigest(t, img).String())
		refs, srcs = append(refs, ref), append(srcs, src)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(refs))
	for i := range refs {
		wg.Go(func() {
			st, err := Open(dir) // a store per importer, as separate processes have
			if err == nil {
				_, err = st.Import(refs[i], srcs[i])
			}
			errs[i] = err
		})
	}
	wg.Wait()
	st, _ := Open(dir)
	for i, ref := range refs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if _, err := st.Image(ref, v1.Platform{}); err != nil {
			t.Errorf("%s: %v", ref, err)
		}
	}
}

func mustDigest(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestImportIndexWithArtifact: an index entry that is neither an image nor
// an index (an attestation, an SBOM) is copied as a blob, verified too.
func TestImportIndexWithArtifact(t *testing.T) {
	for _, tamper := range []bool{false, true} {
		src := t.TempDir()
		m, _, _ := writeTestLayout(t, src, []byte("layer bytes"))
		artifact := []byte(`{"sbom":"x"}`)
		art := v1.Descriptor{MediaType: "application/vnd.example.sbom+json", Size: int64(len(artifact)), Digest: sha256Of(artifact)}
		if tamper {
			artifact = []byte(`{"sbom":"y"}`)
		}
		os.WriteFile(blobFile(src, art), artifact, 0o644)
		idx, _ := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{m, art}})
		id := v1.Descriptor{MediaType: types.OCIImageIndex, Size: int64(len(idx)), Digest: sha256Of(idx)}
		os.WriteFile(blobFile(src, id), idx, 0o644)
		writeIndexJSON(t, src, id)

		st, _ := Open(t.TempDir())
		ref, _ := name.NewDigest("example.test/x@" + id.Digest.String())
		_, err := st.Import(ref, src)
		if tamper {
			if !errors.Is(err, ErrDigestMismatch) {
				t.Errorf("tampered artifact: err = %v, want a digest mismatch", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(blobFile(st.Dir(), art)); err != nil || string(b) != `{"sbom":"x"}` {
			t.Errorf("artifact in the store: %q, %v", b, err)
		}
	}
}
