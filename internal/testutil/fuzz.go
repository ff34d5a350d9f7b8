package testutil

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// ScratchDir returns a directory for a fuzz target's files, made once per
// fuzzing process (call it from the target, not from f.Fuzz's function)
// and removed when tb ends: on a tmpfs when the host has one at /dev/shm,
// as on a loaded disk every file written costs about a millisecond, more
// than an input takes; in tb.TempDir() otherwise. The directory is shared
// by all inputs: a target that writes per input empties what it wrote
// before the next one.
func ScratchDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "osb-fuzz-")
	if err != nil {
		return tb.TempDir()
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// FixTarChecksums rewrites, in place, the checksum of each header of the
// tar stream b, following the sizes the headers claim, up to the end of
// the archive or the first size it cannot follow (base-256, garbage). A
// fuzzer's mutated name, type or size then reaches the code under test
// instead of failing tar's checksum test; a header written by hand gets
// its checksum the same way.
func FixTarChecksums(b []byte) {
	for off := 0; off+512 <= len(b); {
		h := b[off : off+512]
		if bytes.Count(h, []byte{0}) == 512 {
			return // the end of the archive
		}
		copy(h[148:156], "        ")
		sum := 0
		for _, c := range h {
			sum += int(c)
		}
		copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum&0o777777))
		size := int64(0)
		if !bytes.ContainsRune([]byte{tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo}, rune(h[156])) {
			n, err := strconv.ParseInt(strings.Trim(string(h[124:136]), " \x00"), 8, 64)
			if err != nil || n < 0 || n > int64(len(b)) {
				return // a size the fix cannot follow
			}
			size = n
		}
		off += 512 + int((size+511)/512*512)
	}
}
