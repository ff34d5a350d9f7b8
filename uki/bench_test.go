package uki

import (
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

var (
	benchOnce           sync.Once
	benchKern, benchIRD []byte
)

// benchInputs are the sizes of a real hypervisor image: a 12 MiB kernel and
// a 100 MiB initrd (root image inside).
func benchInputs(b *testing.B) Options {
	benchOnce.Do(func() {
		benchKern = blob(11, 12<<20)
		benchIRD = blob(12, 100<<20)
	})
	o := testOptions(hostStub(b))
	o.Kernel, o.Initrd = benchKern, benchIRD
	return o
}

// benchToFile runs write against a fresh file per iteration, the way the
// builder writes its output.
func benchToFile(b *testing.B, write func(io.Writer) error) {
	dir := b.TempDir()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		f, err := os.Create(filepath.Join(dir, "out.efi"))
		if err != nil {
			b.Fatal(err)
		}
		if err := write(f); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAssemble builds an unsigned UKI into a file.
func BenchmarkAssemble(b *testing.B) {
	o := benchInputs(b)
	b.SetBytes(int64(len(o.Stub) + len(o.Kernel) + len(o.Initrd)))
	benchToFile(b, func(w io.Writer) error { _, err := Write(w, o); return err })
}

// BenchmarkAssembleSigned builds and signs a UKI into a file.
func BenchmarkAssembleSigned(b *testing.B) {
	o := benchInputs(b)
	dir := b.TempDir()
	if err := GenerateKey(dir, "bench"); err != nil {
		b.Fatal(err)
	}
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		b.Fatal(err)
	}
	o.Signer, o.Certificate = key, cert
	b.SetBytes(int64(len(o.Stub) + len(o.Kernel) + len(o.Initrd)))
	benchToFile(b, func(w io.Writer) error { _, err := Write(w, o); return err })
}

// BenchmarkCopyFloor writes the same input bytes to a file unchanged: the
// floor no assembler can beat.
func BenchmarkCopyFloor(b *testing.B) {
	o := benchInputs(b)
	b.SetBytes(int64(len(o.Stub) + len(o.Kernel) + len(o.Initrd)))
	benchToFile(b, func(w io.Writer) error {
		for _, p := range [][]byte{o.Stub, o.Kernel, o.Initrd} {
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkAssembleDiscard is the assembler's own CPU cost (layout and
// checksum, no I/O).
func BenchmarkAssembleDiscard(b *testing.B) {
	o := benchInputs(b)
	b.SetBytes(int64(len(o.Stub) + len(o.Kernel) + len(o.Initrd)))
	for b.Loop() {
		if _, err := Write(io.Discard, o); err != nil {
			b.Fatal(err)
		}
	}
}
