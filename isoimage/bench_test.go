package isoimage

import (
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// Benchmarks: a 64 MiB UKI and a 512 MiB root image as /ROOT.IMG, written
// as an ISO versus the floor of copying the bytes the ISO holds (the UKI
// once: its plain file shares the FAT boot image's run) to one file.

const (
	benchUKISize  = 64 * mib
	benchRootSize = 512 * mib
)

func benchInputs(b *testing.B) (dir, uki, root string) {
	b.Helper()
	dir = b.TempDir()
	return dir, writeInput(b, dir, "uki.efi", benchUKISize, 11), writeInput(b, dir, "root.squashfs", benchRootSize, 12)
}

func BenchmarkWriteISO(b *testing.B) {
	dir, uki, root := benchInputs(b)
	out := filepath.Join(dir, "image.iso")
	opts := Options{UKI: uki, Files: map[string]string{"ROOT.IMG": root}, Seed: "bench", SourceDateEpoch: 1700000000}
	testutil.Throughput(b, benchUKISize+benchRootSize, func() error { return Write(out, opts) })
}

// BenchmarkISOCopyFloor copies the bytes the ISO holds into one file and
// syncs it: the least any ISO writer has to do.
func BenchmarkISOCopyFloor(b *testing.B) {
	dir, uki, root := benchInputs(b)
	testutil.CopyFloor(b, filepath.Join(dir, "copy.iso"), uki, root)
}
