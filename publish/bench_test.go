package publish_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
	"github.com/ironcore-dev/os-builder/publish"
)

const benchSize = 256 << 20

// bigOutputDir writes an output directory whose disk.raw is benchSize bytes
// of pseudo-random data (incompressible, like a real root image).
func bigOutputDir(b *testing.B) (dir, disk string) {
	b.Helper()
	dir = b.TempDir()
	disk = filepath.Join(dir, "disk.raw")
	f, err := os.Create(disk)
	if err != nil {
		b.Fatal(err)
	}
	h := sha256.New()
	rng := rand.NewChaCha8([32]byte{1})
	if _, err := io.CopyN(io.MultiWriter(f, h), rng, benchSize); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	m := &osimage.BuildManifest{
		Recipe: "bench", Version: "0", Architecture: "amd64", Cmdline: osimagetest.Cmdline,
		Artifacts: []osimage.Artifact{{Kind: osimage.KindDisk, Path: "disk.raw", Size: benchSize, SHA256: hex.EncodeToString(h.Sum(nil))}},
	}
	if err := osimagetest.WriteManifest(dir, m); err != nil {
		b.Fatal(err)
	}
	return dir, disk
}

// BenchmarkPush pushes a 256 MiB artifact to the local registry; each
// iteration uses a new repository so the blob is really uploaded. Compare
// its MB/s with BenchmarkCopyFloor's:
//
//	go test ./publish -run XXX -bench . -benchtime 3x
func BenchmarkPush(b *testing.B) {
	host := requireRegistry(b)
	dir, _ := bigOutputDir(b)
	b.SetBytes(benchSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ref := fmt.Sprintf("%s/bench/push-%d-%d:0", host, os.Getpid(), i)
		if _, err := publish.Push(context.Background(), dir, ref, insecure); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopyFloor copies the same bytes file to file through a user-space
// buffer and hashes them once: the least work any push must do (read, hash,
// write once more on the registry's side).
func BenchmarkCopyFloor(b *testing.B) {
	_, disk := bigOutputDir(b)
	dst := filepath.Join(b.TempDir(), "copy")
	b.SetBytes(benchSize)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		in, err := os.Open(disk)
		if err != nil {
			b.Fatal(err)
		}
		out, err := os.Create(dst)
		if err != nil {
			b.Fatal(err)
		}
		h := sha256.New()
		// Wrapping hides ReaderFrom/WriterTo so no copy_file_range shortcut.
		if _, err := io.CopyBuffer(struct{ io.Writer }{io.MultiWriter(out, h)}, struct{ io.Reader }{in}, make([]byte, 1<<20)); err != nil {
			b.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
