package diskimage

import (
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// Benchmarks: a 64 MiB UKI and a 512 MiB root image, written as a disk
// image versus the floor of copying the same bytes to one file.

const (
	benchUKISize  = 64 * MiB
	benchRootSize = 512 * MiB
)

func benchInputs(b *testing.B) (dir, uki, root string) {
	b.Helper()
	dir = b.TempDir()
	return dir, writeInput(b, dir, "uki.efi", benchUKISize, 11), writeInput(b, dir, "root.squashfs", benchRootSize, 12)
}

func BenchmarkWriteDisk(b *testing.B) {
	dir, uki, root := benchInputs(b)
	out := filepath.Join(dir, "disk.raw")
	opts := Options{UKI: uki, Root: root, Seed: "bench", SourceDateEpoch: 1700000000}
	testutil.Throughput(b, benchUKISize+benchRootSize, func() error { return Write(out, opts) })
}

// BenchmarkCopyFloor copies the UKI and root bytes into one file and syncs
// it, like Write does: the least any disk writer has to do.
func BenchmarkCopyFloor(b *testing.B) {
	dir, uki, root := benchInputs(b)
	testutil.CopyFloor(b, filepath.Join(dir, "copy.raw"), uki, root)
}
