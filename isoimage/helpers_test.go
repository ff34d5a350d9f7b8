package isoimage

import (
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// writeInput writes size pseudo-random bytes (from seed) to dir/name.
func writeInput(t testing.TB, dir, name string, size int64, seed uint64) string {
	t.Helper()
	return testutil.WriteFile(t, dir, name, testutil.RandomBytes(size, seed))
}
