package sources

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// fuzzPaths are what a recipe might ask for, the odd ones included.
var fuzzPaths = map[string]string{
	"/usr/bin/tool":   "/usr/bin/tool",
	"/bin/link":       "/usr/bin/link",
	"../../etc/x":     "/etc/x",
	"/":               "/root-dir",
	"/usr/lib/../lib": "/usr/lib/y",
}

// layerTar renders a layer described one entry a line as a tar stream:
//
//	fNAME=DATA    a regular file holding DATA
//	FNAME=SIZE    a regular file whose header claims SIZE bytes (huge ones
//	              too) with at most 64 of them there: the stream ends early
//	lNAME>TARGET  a symbolic link
//	hNAME>TARGET  a hard link
//	dNAME         a directory
//	TNAME         an entry of type byte T (devices, fifos, anything)
//
// A fuzzer mutating these few bytes reaches names, links, whiteouts and
// sizes; mutating a tar stream itself almost only breaks header checksums,
// and a 2 KiB input takes the fuzzer seconds to minimize. archive/tar's
// own format is the standard library's to fuzz. Lines tar.Writer refuses
// are left out.
func layerTar(desc []byte) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, line := range strings.Split(string(desc), "\n") {
		if line == "" {
			continue
		}
		typ, rest := line[0], line[1:]
		h := &tar.Header{Name: rest, Typeflag: typ, Mode: 0o755}
		var data []byte
		switch typ {
		case 'f':
			h.Typeflag = tar.TypeReg
			name, content, _ := strings.Cut(rest, "=")
			h.Name, h.Size, data = name, int64(len(content)), []byte(content)
		case 'F':
			h.Typeflag = tar.TypeReg
			name, size, _ := strings.Cut(rest, "=")
			n, err := strconv.ParseInt(size, 10, 64)
			if err != nil || n < 0 {
				continue
			}
			h.Name, h.Size = name, n
			data = bytes.Repeat([]byte("b"), int(min(n, 64)))
		case 'l', 'h':
			h.Typeflag = tar.TypeSymlink
			if typ == 'h' {
				h.Typeflag = tar.TypeLink
			}
			h.Name, h.Linkname, _ = strings.Cut(rest, ">")
		case 'd':
			h.Typeflag = tar.TypeDir
		}
		if tw.WriteHeader(h) != nil {
			continue
		}
		if _, err := tw.Write(data); err != nil {
			continue
		}
		if int64(len(data)) < h.Size {
			return buf.Bytes() // the claimed rest never comes
		}
	}
	tw.Close()
	return buf.Bytes()
}

// layersImage is an image of its layers alone: all extractPaths reads.
// mutate.AppendLayers would do, at the price of a config and a manifest
// per input, more than the extraction costs.
type layersImage struct {
	v1.Image // nil: a method extractPaths does not call today panics
	layers   []v1.Layer
}

func (i layersImage) Layers() ([]v1.Layer, error) { return i.layers, nil }

// FuzzExtractPaths: whatever two layers hold (names with .. or /, links
// anywhere, whiteouts, opaque directories, devices, huge sizes), extractPaths
// writes only plain files directly in out, nothing outside it, and none
// larger than the layers. The layers come from short descriptions
// (layerTar); out is one directory on a tmpfs, emptied after each input:
// the target fuzzes the extraction, not tar checksums or mkdir.
func FuzzExtractPaths(f *testing.F) {
	const maxLayerDescs = 512
	for _, seed := range [][2]string{
		{"fusr/bin/tool=tool!", "fusr/bin/.wh.tool="},
		{"lbin>usr/bin\nfusr/bin/link=abc", "lusr/bin/link>../../../../etc/passwd"},
		{"f../../etc/x=four\nf/usr/lib/y=y", "husr/bin/tool>/etc/x"},
		{"Fusr/bin/tool=1099511627776", ""},
		{"fusr/bin/tool=to", "fusr/.wh..wh..opq=\nlusr>/"},
		{"fusr/bin/tool=tool\nhroot-dir>/usr/bin/tool", "fusr/lib/.wh.lib=\nllib>usr/bin"},
		{"dusr\ndusr/bin\n3usr/bin/tool", "fetc/x=x\nlusr/lib>../etc"},
	} {
		f.Add([]byte(seed[0]), []byte(seed[1]))
	}
	parent := testutil.ScratchDir(f)
	out := filepath.Join(parent, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, lowerDesc, upperDesc []byte) {
		// A dozen entries a layer reach every case; the fuzzer left to
		// grow inputs spends its time minimizing kilobytes instead.
		if len(lowerDesc)+len(upperDesc) > maxLayerDescs {
			return
		}
		lower, upper := layerTar(lowerDesc), layerTar(upperDesc)
		img := layersImage{layers: []v1.Layer{
			static.NewLayer(lower, types.OCIUncompressedLayer), static.NewLayer(upper, types.OCIUncompressedLayer),
		}}
		_ = extractPaths(img, fuzzPaths, out)

		// parent holds out alone, out plain files no larger than the
		// layers; whatever this input left goes, so that the next one
		// starts from an empty out.
		held := int64(len(lower) + len(upper))
		entries, err := os.ReadDir(parent)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Name() != filepath.Base(out) {
				t.Errorf("written outside out: %s", e.Name())
				os.RemoveAll(filepath.Join(parent, e.Name()))
			}
		}
		if entries, err = os.ReadDir(out); err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			p := filepath.Join(out, e.Name())
			if !e.Type().IsRegular() {
				t.Errorf("not a plain file: %s (%v)", p, e.Type())
			} else if fi, err := e.Info(); err != nil || fi.Size() > held {
				t.Errorf("%s: %v bytes (%v) from %d bytes of layers", p, fi.Size(), err, held)
			}
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestSparseEntryRefused: a layer of one 512-byte header declaring a 4 GiB
// GNU sparse file (no data at all) is refused, not written as 4 GiB of
// zeros.
func TestSparseEntryRefused(t *testing.T) {
	var blk [1024]byte // the header and the end-of-archive block
	copy(blk[0:], "usr/bin/tool")
	copy(blk[100:], "0000755\x00")
	copy(blk[108:], "0000000\x00")
	copy(blk[116:], "0000000\x00")
	copy(blk[124:], "00000000000\x00") // no bytes in the layer
	copy(blk[136:], "00000000000\x00")
	blk[156] = tar.TypeGNUSparse
	copy(blk[257:], "ustar  \x00")
	copy(blk[483:], "40000000000\x00") // real size: 4 GiB
	testutil.FixTarChecksums(blk[:])
	data := append(blk[:], make([]byte, 512)...)
	l := static.NewLayer(data, types.DockerUncompressedLayer)
	out := t.TempDir()
	err := extractPaths(layersImage{layers: []v1.Layer{l}}, map[string]string{"/usr/bin/tool": "/usr/bin/tool"}, out)
	if err == nil || !strings.Contains(err.Error(), "sparse") {
		t.Fatalf("err = %v, want a sparse file refused", err)
	}
	if n := bytesUnder(out); n != 0 {
		t.Errorf("wrote %d bytes", n)
	}
}

// bytesUnder is the bytes of the files under dir.
func bytesUnder(dir string) int64 {
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
