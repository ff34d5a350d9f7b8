package testutil

import (
	"io"
	"os"
	"testing"
)

// CopyFloor benchmarks the least any image writer has to do: copy the
// bytes of srcs, in order, into one file at out and sync it. It sets the
// benchmark's bytes to the sum of the sources' sizes.
func CopyFloor(b *testing.B, out string, srcs ...string) {
	b.Helper()
	var total int64
	for _, s := range srcs {
		fi, err := os.Stat(s)
		if err != nil {
			b.Fatal(err)
		}
		total += fi.Size()
	}
	Throughput(b, total, func() error { return concat(out, srcs) })
}

// Throughput benchmarks op, which handles n bytes per call, so the result
// is in MB/s; the setup before it is not timed.
func Throughput(b *testing.B, n int64, op func() error) {
	b.Helper()
	b.SetBytes(n)
	b.ResetTimer()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}

// concat writes the bytes of srcs into a new file at out and syncs it.
func concat(out string, srcs []string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, s := range srcs {
		in, err := os.Open(s)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, in)
		in.Close()
		if err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
