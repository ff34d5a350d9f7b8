// Package buildertest holds what the builder's test packages share: the
// repository's root and recipes, tools a test needs, and small checks.
// Tests only.
package buildertest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/recipe"
)

// RepoRoot is the module root: the first directory up from the test's
// own that holds go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// RequireTools stops the test unless the tools are installed: a skip on a
// developer machine, a failure in CI.
func RequireTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		testutil.RequireTool(t, tool)
	}
}

// CopyRecipeTree copies recipes/ and units/ into a temp dir, so a test may
// edit them without touching the repository.
func CopyRecipeTree(t testing.TB) string {
	t.Helper()
	dst := t.TempDir()
	for _, d := range []string{"recipes", "units"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(RepoRoot(t), d), dst).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v\n%s", d, err, out)
		}
	}
	return dst
}

// TestRecipe loads the repository's test recipe.
func TestRecipe(t testing.TB) *recipe.Recipe {
	t.Helper()
	r, err := recipe.Load(filepath.Join(RepoRoot(t), "recipes/test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Must fails the test on err.
func Must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// OpenRoot opens dir as an image root for a test.
func OpenRoot(t testing.TB, dir string) *fsroot.Root {
	t.Helper()
	r, err := fsroot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// Epoch is a SOURCE_DATE_EPOCH for tests: the builder's default.
const Epoch = 1735689600

// ClosedPort is a loopback address nothing listens on: a registry that
// refuses connections at once.
func ClosedPort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
