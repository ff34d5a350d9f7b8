package ocistore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// writeTestLayout writes a layout by hand: one image (config + one layer)
// under index.json; it returns the dir and the three descriptors.
func writeTestLayout(t testing.TB, dir string, layer []byte) (manifest, config, lay v1.Descriptor) {
	t.Helper()
	put := func(b []byte, mt types.MediaType) v1.Descriptor {
		d := v1.Descriptor{MediaType: mt, Size: int64(len(b)), Digest: sha256Of(b)}
		p := filepath.Join(dir, "blobs", "sha256", d.Digest.Hex)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	config = put([]byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`), types.OCIConfigJSON)
	lay = put(layer, types.OCIUncompressedLayer)
	mf, _ := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: config, Layers: []v1.Descriptor{lay}})
	manifest = put(mf, types.OCIManifestSchema1)
	writeIndexJSON(t, dir, manifest)
	return manifest, config, lay
}

func writeIndexJSON(t testing.TB, dir string, ds ...v1.Descriptor) {
	t.Helper()
	b, _ := json.Marshal(v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: ds})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// readAll walks what a layout offers the way the builder and publish do:
// each image's manifest, config and every layer read to its end.
func readAll(l *Layout) error {
	root, err := l.Index()
	if err != nil {
		return err
	}
	return readIndex(root)
}

// readIndex reads every image root names, to the end of every layer.
func readIndex(root v1.ImageIndex) error {
	im, err := root.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range im.Manifests {
		img, err := root.Image(d.Digest)
		if err != nil {
			return err
		}
		if _, err := img.RawConfigFile(); err != nil {
			return err
		}
		layers, err := img.Layers()
		if err != nil {
			return err
		}
		for _, layer := range layers {
			rc, err := layer.Compressed()
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func TestLayoutVerifiesEveryRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(t *testing.T, dir string, manifest, config, layer v1.Descriptor)
		wantErr string // empty: reads fine
		is      error
	}{
		{name: "intact"},
		{name: "layer altered, same size", change: func(t *testing.T, dir string, _, _, l v1.Descriptor) {
			os.WriteFile(blobFile(dir, l), []byte("layer bytez"), 0o644)
		}, is: ErrDigestMismatch},
		{name: "layer longer", change: func(t *testing.T, dir string, _, _, l v1.Descriptor) {
			os.WriteFile(blobFile(dir, l), []byte("layer bytes and more"), 0o644)
		}, wantErr: "more than the 11 bytes", is: ErrDigestMismatch},
		{name: "config altered, same size", change: func(t *testing.T, dir string, _, c, _ v1.Descriptor) {
			b, _ := os.ReadFile(blobFile(dir, c))
			os.WriteFile(blobFile(dir, c), []byte(strings.Replace(string(b), "amd64", "arm64", 1)), 0o644)
		}, is: ErrDigestMismatch},
		{name: "manifest altered, same size", change: func(t *testing.T, dir string, m, _, _ v1.Descriptor) {
			b, _ := os.ReadFile(blobFile(dir, m))
			os.WriteFile(blobFile(dir, m), []byte(strings.Replace(string(b), "schemaVersion", "schemaVersioN", 1)), 0o644)
		}, is: ErrDigestMismatch},
		{name: "manifest size over the limit", change: func(t *testing.T, dir string, m, _, _ v1.Descriptor) {
			m.Size = MaxManifestSize + 1
			writeIndexJSON(t, dir, m)
		}, wantErr: "over the 4194304-byte limit"},
		{name: "blob is a symlink", change: func(t *testing.T, dir string, _, _, l v1.Descriptor) {
			os.Remove(blobFile(dir, l))
			os.Symlink("/etc/hostname", blobFile(dir, l))
		}, wantErr: "not a regular file"},
		{name: "digest that is a path", change: func(t *testing.T, dir string, m, _, _ v1.Descriptor) {
			os.WriteFile(filepath.Join(dir, "index.json"), fmt.Appendf(nil,
				`{"schemaVersion":2,"manifests":[{"mediaType":%q,"size":%d,"digest":"sha256:../../../etc/passwd"}]}`, m.MediaType, m.Size), 0o644)
		}, wantErr: "index.json"},
		{name: "index.json over the limit", change: func(t *testing.T, dir string, _, _, _ v1.Descriptor) {
			os.WriteFile(filepath.Join(dir, "index.json"), make([]byte, MaxManifestSize+1), 0o644)
		}, wantErr: "over the 4194304-byte limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m, c, l := writeTestLayout(t, dir, []byte("layer bytes"))
			if tc.change != nil {
				tc.change(t, dir, m, c, l)
			}
			lo, err := OpenLayout(dir)
			if err != nil {
				t.Fatal(err)
			}
			err = readAll(lo)
			if tc.wantErr == "" && tc.is == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("err = %v, want %q (%v)", err, tc.wantErr, tc.is)
			}
		})
	}
}

func blobFile(dir string, d v1.Descriptor) string {
	return filepath.Join(dir, "blobs", d.Digest.Algorithm, d.Digest.Hex)
}

// FuzzLayout: whatever index.json and a manifest blob hold, reading the
// layout neither panics nor hands out an unverified blob: a read that
// succeeds returned the very bytes the descriptor names. The layout is
// written once; index.json is parsed from the fuzzed bytes as Index does
// after reading the file, and only the fuzzed manifest is written, under
// its own digest so that the index can name it.
func FuzzLayout(f *testing.F) {
	dir := testutil.ScratchDir(f)
	m, _, _ := writeTestLayout(f, dir, []byte("layer bytes"))
	idx, _ := os.ReadFile(filepath.Join(dir, "index.json"))
	mf, _ := os.ReadFile(blobFile(dir, m))
	f.Add(idx, mf)
	f.Add([]byte(`{"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"sha256:`+m.Digest.Hex+`","size":1}]}`), mf)
	f.Add([]byte(`{"manifests":[{"digest":"sha512:00","size":-1}]}`), []byte(`{"layers":[{"digest":"sha256:../x"}]}`))
	l, err := OpenLayout(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, index, manifest []byte) {
		if len(index) > MaxManifestSize {
			return // Index refuses it before parsing
		}
		p := blobFile(dir, v1.Descriptor{Digest: sha256Of(manifest)})
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			if err := os.WriteFile(p, manifest, 0o644); err != nil {
				t.Fatal(err)
			}
			defer os.Remove(p) // the layout's own blobs stay
		}
		root, err := newIndex(l, v1.Descriptor{MediaType: types.OCIImageIndex, Size: int64(len(index)), Digest: sha256Of(index)}, index, "index.json")
		if err != nil {
			return
		}
		readIndex(root)
		im, err := root.IndexManifest()
		if err != nil {
			return
		}
		for _, desc := range im.Manifests {
			if desc.MediaType.IsIndex() {
				root.ImageIndex(desc.Digest)
			}
			if b, err := l.ReadSmall(desc); err == nil && sha256Of(b) != desc.Digest && desc.Digest.Algorithm == "sha256" {
				t.Fatalf("ReadSmall(%v) returned bytes of another digest", desc)
			}
		}
	})
}
