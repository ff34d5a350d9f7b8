package sources

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fuzzPaths are what a recipe might ask for, the odd ones included.
var fuzzPaths = map[string]string{
	"/usr/bin/tool":   "/usr/bin/tool",
	"/bin/link":       "/usr/bin/link",
	"../../etc/x":     "/etc/x",
	"/":               "/root-dir",
	"/usr/lib/../lib": "/usr/lib/y",
}

func rawTar(t testing.TB, hs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(strings.Repeat("b", int(min(h.Size, 64))))) // huge sizes stay truncated
	}
	tw.Flush()
	return buf.Bytes()
}

// FuzzExtractPaths: whatever two layers hold (names with .. or /, links
// anywhere, whiteouts, huge sizes, garbage), extractPaths writes only
// plain files directly in out, and nothing outside it.
func FuzzExtractPaths(f *testing.F) {
	reg := func(name string, size int64) *tar.Header {
		return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o755, Size: size}
	}
	link := func(name, to string, typ byte) *tar.Header {
		return &tar.Header{Name: name, Typeflag: typ, Linkname: to, Mode: 0o777}
	}
	f.Add(rawTar(f, reg("usr/bin/tool", 5)), rawTar(f, reg("usr/bin/.wh.tool", 0)))
	f.Add(rawTar(f, link("bin", "usr/bin", tar.TypeSymlink), reg("usr/bin/link", 3)), rawTar(f, link("usr/bin/link", "../../../../etc/passwd", tar.TypeSymlink)))
	f.Add(rawTar(f, reg("../../etc/x", 4), reg("/usr/lib/y", 1)), rawTar(f, link("usr/bin/tool", "/etc/x", tar.TypeLink)))
	f.Add(rawTar(f, &tar.Header{Name: "usr/bin/tool", Typeflag: tar.TypeReg, Size: 1 << 40}), []byte("garbage"))
	f.Add(rawTar(f, reg("usr/bin/tool", 2)), rawTar(f, reg("usr/.wh..wh..opq", 0), link("usr", "/", tar.TypeSymlink)))
	f.Fuzz(func(t *testing.T, lower, upper []byte) {
		img, err := mutate.AppendLayers(empty.Image,
			static.NewLayer(lower, types.OCIUncompressedLayer), static.NewLayer(upper, types.OCIUncompressedLayer))
		if err != nil {
			t.Fatal(err)
		}
		parent := t.TempDir()
		out := filepath.Join(parent, "out")
		if err := os.Mkdir(out, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = extractPaths(img, fuzzPaths, out)
		err = filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			switch {
			case p == parent || p == out:
			case filepath.Dir(p) != out:
				t.Errorf("written outside out: %s", p)
			case !d.Type().IsRegular():
				t.Errorf("not a plain file: %s (%v)", p, d.Type())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
