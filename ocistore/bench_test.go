package ocistore

import (
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

// BenchmarkVerifyingReader: the cost every store read now pays (sha256).
func BenchmarkVerifyingReader(b *testing.B) {
	data := make([]byte, 64<<20)
	rand.Read(data)
	d := sha256Of(data)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r := NewVerifyingReader(io.NopCloser(bytes.NewReader(data)), "bench", d, int64(len(data)))
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkImport: importing a layout with a 64 MiB layer (copy and
// verify every blob).
func BenchmarkImport(b *testing.B) {
	layer := make([]byte, 64<<20)
	rand.Read(layer)
	src := b.TempDir()
	m, _, _ := writeTestLayout(b, src, layer)
	ref, _ := name.NewDigest("example.test/x@" + m.Digest.String())
	b.SetBytes(int64(len(layer)))
	for b.Loop() {
		dir := filepath.Join(b.TempDir(), "store")
		st, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.Import(ref, src); err != nil {
			b.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}
