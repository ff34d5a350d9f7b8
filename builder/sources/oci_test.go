package sources

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/ocistore"
	"github.com/ironcore-dev/os-builder/recipe"
)

type tarEntry struct {
	name, body, link string
	typ              byte
}

func tarLayer(t *testing.T, entries ...tarEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o755, Linkname: e.link, ModTime: time.Unix(buildertest.Epoch, 0)}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage has two layers: the first holds a tool, a file and links to the
// tool; the second whites the file out.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	base := tarLayer(t,
		tarEntry{name: "usr/", typ: tar.TypeDir},
		tarEntry{name: "usr/local/", typ: tar.TypeDir},
		tarEntry{name: "usr/local/bin/", typ: tar.TypeDir},
		tarEntry{name: "usr/local/bin/tool", typ: tar.TypeReg, body: "#!/bin/sh\necho tool\n"},
		tarEntry{name: "usr/local/bin/gone", typ: tar.TypeReg, body: "removed by the next layer\n"},
		tarEntry{name: "usr/local/bin/tool-rel", typ: tar.TypeSymlink, link: "tool"},
		tarEntry{name: "usr/bin", typ: tar.TypeSymlink, link: "local/bin"},
	)
	top := tarLayer(t,
		tarEntry{name: "usr/local/bin/.wh.gone", typ: tar.TypeReg},
		tarEntry{name: "etc/", typ: tar.TypeDir},
		tarEntry{name: "etc/tool.conf", typ: tar.TypeReg, body: "conf\n"},
	)
	img, err := mutate.AppendLayers(empty.Image, base, top)
	if err != nil {
		t.Fatal(err)
	}
	return testutil.LinuxImage(t, img, "amd64", nil)
}

func pushTestImage(t *testing.T, registry, repo string) string {
	t.Helper()
	img := testImage(t)
	return testutil.PushImage(t, registry+"/"+repo+":v1", img)
}

func TestOCIStepFromRegistry(t *testing.T) {
	reg := testutil.NewRegistry(t)
	digest := pushTestImage(t, reg, "ironcore/tools")
	cases := []struct {
		name    string
		paths   map[string]string
		want    map[string]string // output file name -> content
		wantErr string
	}{
		{
			name:  "regular file",
			paths: map[string]string{"/usr/local/bin/tool": "/usr/local/bin/tool"},
			want:  map[string]string{"usr%local%bin%tool": "#!/bin/sh\necho tool\n"},
		},
		{
			name:  "relative symlink resolved",
			paths: map[string]string{"/usr/local/bin/tool-rel": "/usr/bin/t"},
			want:  map[string]string{"usr%local%bin%tool-rel": "#!/bin/sh\necho tool\n"},
		},
		{
			name:  "through a linked directory",
			paths: map[string]string{"/usr/bin/tool": "/usr/bin/t"},
			want:  map[string]string{"usr%bin%tool": "#!/bin/sh\necho tool\n"},
		},
		{
			name:  "file from the upper layer",
			paths: map[string]string{"/etc/tool.conf": "/etc/tool.conf"},
			want:  map[string]string{"etc%tool.conf": "conf\n"},
		},
		{
			name:    "whiteout honoured",
			paths:   map[string]string{"/usr/local/bin/gone": "/usr/bin/gone"},
			wantErr: "path /usr/local/bin/gone not found in image",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			s := &OCI{src: recipe.OCISource{Image: reg + "/ironcore/tools:v1@" + digest, Paths: tc.paths}, arch: "amd64", storeDir: t.TempDir()}
			err := s.Run(context.Background(), out)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for f, want := range tc.want {
				b, err := os.ReadFile(filepath.Join(out, f))
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != want {
					t.Errorf("%s = %q, want %q", f, b, want)
				}
			}
		})
	}
}

func TestOCIStepThroughMirror(t *testing.T) {
	reg := testutil.NewRegistry(t)
	digest := pushTestImage(t, reg, "ironcore-dev/tools")
	t.Setenv(MirrorsEnv, "ghcr.io="+reg)
	s := &OCI{src: recipe.OCISource{Image: "ghcr.io/ironcore-dev/tools:v1@" + digest, Paths: map[string]string{"/usr/local/bin/tool": "/usr/bin/tool"}}, arch: "amd64", storeDir: t.TempDir()}
	out := t.TempDir()
	if err := s.Run(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "usr%local%bin%tool")); err != nil {
		t.Fatal(err)
	}
	// The preflight sees the mirror too.
	r := &recipe.Recipe{Base: recipe.Base{Architecture: "amd64"}, Resolved: []*recipe.Layer{{Name: "tools", OCI: []recipe.OCISource{s.src}}}}
	if err := PreflightOCI(context.Background(), r, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	// A mirror serving another image under the same name is caught.
	bad := recipe.OCISource{Image: "ghcr.io/ironcore-dev/tools:v1@sha256:" + strings.Repeat("ab", 32), Paths: s.src.Paths}
	r.Resolved[0].OCI = []recipe.OCISource{bad}
	if err := PreflightOCI(context.Background(), r, t.TempDir()); err == nil {
		t.Fatal("preflight accepted a digest the mirror does not have")
	}
}

func TestParseRegistryMirrors(t *testing.T) {
	cases := []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{in: "", want: map[string]string{}},
		{in: "ghcr.io=127.0.0.1:5000", want: map[string]string{"ghcr.io": "127.0.0.1:5000"}},
		{in: " ghcr.io = mirror.example/ghcr/ , docker.io=http://10.0.0.1:80", want: map[string]string{"ghcr.io": "mirror.example/ghcr", "docker.io": "http://10.0.0.1:80"}},
		{in: "ghcr.io", wantErr: true},
		{in: "ghcr.io/x=y", wantErr: true},
		{in: "=y", wantErr: true},
	}
	for _, tc := range cases {
		got, err := ParseRegistryMirrors(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err = %v", tc.in, err)
			continue
		}
		if !tc.wantErr && fmt.Sprint(map[string]string(got)) != fmt.Sprint(tc.want) {
			t.Errorf("%q = %v, want %v", tc.in, got, tc.want)
		}
	}
	m, _ := ParseRegistryMirrors("ghcr.io=mirror.example/ghcr")
	ref, _ := name.NewDigest("ghcr.io/ironcore-dev/dpservice:v1@sha256:" + strings.Repeat("0", 64))
	got, via, err := m.Rewrite(ref)
	if err != nil || got.String() != "mirror.example/ghcr/ironcore-dev/dpservice@sha256:"+strings.Repeat("0", 64) || via != "mirror.example/ghcr" {
		t.Errorf("Rewrite = %v %q %v", got, via, err)
	}
}

// writeLayout saves img as an OCI image layout directory.
func writeLayout(t *testing.T, img v1.Image) string {
	t.Helper()
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tarDir archives dir (an oci-archive when dir is a layout).
func tarDir(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		h.Name = rel
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCacheImportOffline imports a pre-fetched image and builds from it
// while its registry is unreachable.
func TestCacheImportOffline(t *testing.T) {
	img := testImage(t)
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	dir := writeLayout(t, img)
	ref, err := name.NewDigest("ghcr.io/ironcore-dev/tools:v1@" + d.String())
	if err != nil {
		t.Fatal(err)
	}
	// Nothing listens on the mirror: only the store can satisfy the step.
	t.Setenv(MirrorsEnv, "ghcr.io="+buildertest.ClosedPort(t))

	for _, src := range []struct{ name, path string }{{"layout dir", dir}, {"oci-archive", tarDir(t, dir)}} {
		t.Run(src.name, func(t *testing.T) {
			cacheDir := t.TempDir()
			st, err := OpenOCIStore(OCIStoreDir(cacheDir))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Import(ref, src.path); err != nil {
				t.Fatal(err)
			}
			s := &OCI{src: recipe.OCISource{Image: ref.String(), Paths: map[string]string{"/usr/bin/tool": "/usr/bin/tool"}}, arch: "amd64", storeDir: OCIStoreDir(cacheDir)}
			out := t.TempDir()
			if err := s.Run(context.Background(), out); err != nil {
				t.Fatal(err)
			}
			r := &recipe.Recipe{Base: recipe.Base{Architecture: "amd64"}, Resolved: []*recipe.Layer{{Name: "tools", OCI: []recipe.OCISource{s.src}}}}
			if err := PreflightOCI(context.Background(), r, cacheDir); err != nil {
				t.Fatalf("preflight with the image in the store: %v", err)
			}
		})
	}

	t.Run("digest mismatch refused", func(t *testing.T) {
		st, err := OpenOCIStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		other, _ := name.NewDigest("ghcr.io/ironcore-dev/tools@sha256:" + strings.Repeat("1", 64))
		_, err = st.Import(other, dir)
		if err == nil || !strings.Contains(err.Error(), "refusing to import a different image") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("corrupt blob refused", func(t *testing.T) {
		bad := t.TempDir()
		if err := os.CopyFS(bad, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		layers, _ := img.Layers()
		ld, _ := layers[0].Digest()
		blob := filepath.Join(bad, "blobs", ld.Algorithm, ld.Hex)
		if err := os.Chmod(blob, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(blob, []byte("tampered"), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := OpenOCIStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Import(ref, bad); err == nil {
			t.Fatal("imported a tampered layer")
		}
	})
}

// silentPort accepts connections and never answers: a registry behind a
// black-holing firewall or a hung proxy.
func silentPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	return l.Addr().String()
}

// TestPreflightUnreachableFast: a source whose registry does not answer
// fails the preflight within seconds, naming the layer, the image and the
// ways around it: an unroutable address, a closed port, and a port that
// accepts but never answers (bounded by the preflight timeout).
func TestPreflightUnreachableFast(t *testing.T) {
	img := "ghcr.io/ironcore-dev/dpservice:v0.3.16@sha256:" + strings.Repeat("0", 64)
	for _, mirror := range []string{"10.255.255.1:5000", buildertest.ClosedPort(t), silentPort(t)} {
		t.Run(mirror, func(t *testing.T) {
			t.Setenv(MirrorsEnv, "ghcr.io="+mirror)
			r := &recipe.Recipe{Base: recipe.Base{Architecture: "amd64"}, Resolved: []*recipe.Layer{
				{Name: "dpservice", OCI: []recipe.OCISource{{Image: img, Paths: map[string]string{"/a": "/a"}}}},
			}}
			start := time.Now()
			err := PreflightOCI(context.Background(), r, t.TempDir())
			took := time.Since(start)
			if err == nil {
				t.Fatal("preflight passed for an unreachable registry")
			}
			if took > 10*time.Second {
				t.Errorf("preflight took %v, want < 10s", took)
			}
			for _, want := range []string{"layer dpservice", img, "via mirror " + mirror, MirrorsEnv + "=ghcr.io=", "builder cache import " + img, "--exclude-layer dpservice"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestPreflightHypervisorRecipe: the shipped recipe's dpservice layer is
// caught by the preflight (this machine reaches no registry, and its
// digest is a placeholder until reviewed), and excluding it passes.
func TestPreflightHypervisorRecipe(t *testing.T) {
	r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(t), "recipes/hypervisor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err = PreflightOCI(ctx, r, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "--exclude-layer dpservice") {
		t.Fatalf("err = %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("preflight took %v", took)
	}
	if err := r.ExcludeLayers("dpservice"); err != nil {
		t.Fatal(err)
	}
	if err := PreflightOCI(ctx, r, t.TempDir()); err != nil {
		t.Fatal(err)
	}
}

// alterBlob changes a layout's blob in place, keeping its size.
func alterBlob(t *testing.T, layoutDir string, h v1.Hash, change func([]byte) []byte) {
	t.Helper()
	p := filepath.Join(layoutDir, "blobs", h.Algorithm, h.Hex)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	after := change(bytes.Clone(b))
	if len(after) != len(b) || bytes.Equal(after, b) {
		t.Fatalf("blob %s: the change must keep the size and change the bytes", h)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, after, 0o644); err != nil {
		t.Fatal(err)
	}
}

func replaceOnce(old, new string) func([]byte) []byte {
	return func(b []byte) []byte { return bytes.Replace(b, []byte(old), []byte(new), 1) }
}

func flipLastByte(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }

// flipGzipOS changes a gzip header's OS byte: the content and gzip's own
// checksum stay intact, only the blob's digest notices.
func flipGzipOS(b []byte) []byte { b[9] ^= 0xff; return b }

// uncompressedImage has one uncompressed layer holding the tool, so a
// changed byte in the blob is a changed byte in the extracted file.
func uncompressedImage(t *testing.T) v1.Image {
	t.Helper()
	l := tarLayer(t, tarEntry{name: "usr/bin/tool", typ: tar.TypeReg, body: "#!/bin/sh\necho tool\n"})
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer(b, types.OCIUncompressedLayer))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// blobOf names one blob of img: "layer" (the first), "config" or "manifest".
func blobOf(t *testing.T, img v1.Image, which string) v1.Hash {
	t.Helper()
	var h v1.Hash
	var err error
	switch which {
	case "layer":
		var ls []v1.Layer
		if ls, err = img.Layers(); err == nil {
			h, err = ls[0].Digest()
		}
	case "config":
		h, err = img.ConfigName()
	case "manifest":
		h, err = img.Digest()
	}
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestCacheImportRefusesAlteredBlob: a source layout whose blob was changed
// in place, keeping its size, is refused by `builder cache import`, and
// the store records nothing.
func TestCacheImportRefusesAlteredBlob(t *testing.T) {
	img := testImage(t)
	d, _ := img.Digest()
	ref, _ := name.NewDigest("ghcr.io/ironcore-dev/tools:v1@" + d.String())
	for _, tc := range []struct {
		name, blob string
		change     func([]byte) []byte
	}{
		{"layer gzip trailer", "layer", flipLastByte},
		{"layer gzip header only", "layer", flipGzipOS},
		{"config architecture", "config", replaceOnce(`"amd64"`, `"arm64"`)},
		{"manifest field", "manifest", replaceOnce(`"schemaVersion"`, `"schemaVersioN"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := writeLayout(t, img)
			alterBlob(t, src, blobOf(t, img, tc.blob), tc.change)
			for _, from := range []string{src, tarDir(t, src)} {
				cacheDir := t.TempDir()
				st, err := OpenOCIStore(OCIStoreDir(cacheDir))
				if err != nil {
					t.Fatal(err)
				}
				_, err = st.Import(ref, from)
				if !errors.Is(err, ocistore.ErrDigestMismatch) {
					t.Fatalf("import from %s: err = %v, want a digest mismatch", filepath.Base(from), err)
				}
				if _, err := st.Image(ref, v1.Platform{OS: "linux", Architecture: "amd64"}); !errors.Is(err, ErrNotInStore) {
					t.Errorf("after a refused import the store has the image: %v", err)
				}
			}
		})
	}
}

// TestOCIStepRefusesStoreBlobAlteredAfterImport: a blob changed in the
// store after a good import (same size) makes the next oci step fail with
// a digest mismatch instead of extracting from it, also when the change
// is in a file the step extracts or where decompression does not look (the
// gzip header); importing the image again repairs the store.
func TestOCIStepRefusesStoreBlobAlteredAfterImport(t *testing.T) {
	for _, tc := range []struct {
		name, blob string
		img        func(*testing.T) v1.Image
		change     func([]byte) []byte
	}{
		{"extracted file content", "layer", uncompressedImage, replaceOnce("echo tool", "echo evil")},
		{"gzip header only", "layer", testImage, flipGzipOS},
		{"manifest", "manifest", testImage, replaceOnce(`"schemaVersion"`, `"schemaVersioN"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := tc.img(t)
			d, _ := img.Digest()
			ref, _ := name.NewDigest("ghcr.io/ironcore-dev/tools:v1@" + d.String())
			// Nothing listens on the mirror: only the store can satisfy the step.
			t.Setenv(MirrorsEnv, "ghcr.io="+buildertest.ClosedPort(t))
			src := writeLayout(t, img)
			storeDir := OCIStoreDir(t.TempDir())
			st, err := OpenOCIStore(storeDir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.Import(ref, src); err != nil {
				t.Fatal(err)
			}
			s := &OCI{src: recipe.OCISource{Image: ref.String(), Paths: map[string]string{"/usr/bin/tool": "/usr/bin/tool"}}, arch: "amd64", storeDir: storeDir}
			if err := s.Run(context.Background(), t.TempDir()); err != nil {
				t.Fatalf("before the change: %v", err)
			}
			alterBlob(t, storeDir, blobOf(t, img, tc.blob), tc.change)
			err = s.Run(context.Background(), t.TempDir())
			if !errors.Is(err, ocistore.ErrDigestMismatch) {
				t.Fatalf("step on an altered store blob: err = %v, want a digest mismatch", err)
			}
			if _, err := st.Import(ref, src); err != nil {
				t.Fatal(err)
			}
			out := t.TempDir()
			if err := s.Run(context.Background(), out); err != nil {
				t.Fatalf("after re-import: %v", err)
			}
			if b, _ := os.ReadFile(filepath.Join(out, "usr%bin%tool")); string(b) != "#!/bin/sh\necho tool\n" {
				t.Errorf("extracted %q", b)
			}
		})
	}
}

// TestPreflightPlatform: an arm64 build of a layer whose image has no
// linux/arm64 build fails at plan time, naming the layer, the image and
// what it has; an index with both serves either architecture.
func TestPreflightPlatform(t *testing.T) {
	reg := testutil.NewRegistry(t)
	amd64Only := pushTestImage(t, reg, "ironcore/amd64-only")
	arm := testutil.LinuxImage(t, testImage(t), "arm64", nil)
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: testImage(t), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	ref, err := name.ParseReference(reg + "/ironcore/multi:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	multi, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{"/usr/local/bin/tool": "/usr/bin/tool"}
	for _, tt := range []struct {
		name, image, arch, wantErr string
	}{
		{"amd64 image, amd64 build", reg + "/ironcore/amd64-only:v1@" + amd64Only, "amd64", ""},
		{"amd64 image, arm64 build", reg + "/ironcore/amd64-only:v1@" + amd64Only, "arm64",
			"layer tools: oci image " + reg + "/ironcore/amd64-only:v1@" + amd64Only + " has no linux/arm64 build (it has: linux/amd64)"},
		{"index, arm64 build", reg + "/ironcore/multi:v1@" + multi.String(), "arm64", ""},
		{"index, amd64 build", reg + "/ironcore/multi:v1@" + multi.String(), "amd64", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &recipe.Recipe{Base: recipe.Base{Architecture: tt.arch}, Resolved: []*recipe.Layer{{Name: "tools", OCI: []recipe.OCISource{{Image: tt.image, Paths: paths}}}}}
			err := PreflightOCI(context.Background(), r, t.TempDir())
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
