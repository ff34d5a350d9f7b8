package diskimage

import (
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// writeInput writes size pseudo-random bytes (from seed) to dir/name, with a
// zero run in the middle so sparse copying is exercised, and returns the path.
func writeInput(t testing.TB, dir, name string, size int64, seed uint64) string {
	t.Helper()
	b := testutil.RandomBytes(size, seed)
	if size > 64<<10 {
		clear(b[size/4 : size/4+32<<10])
	}
	return testutil.WriteFile(t, dir, name, b)
}
