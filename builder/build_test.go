package builder

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// repoRoot is the module root, two levels up from this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	abs, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// requireTools stops the test unless the tools are installed: a skip on a
// developer machine, a failure in CI.
func requireTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		testutil.RequireTool(t, tool)
	}
}

// copyRecipeTree copies recipes/ and units/ into a temp dir, so a test may
// edit them without touching the repository.
func copyRecipeTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, d := range []string{"recipes", "units"} {
		if err := run(context.Background(), "cp", "-a", filepath.Join(repoRoot(t), d), dst); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// sharedCacheDir is the builder's default cache, the one `make test` and
// `bin/builder build` fill too: tests reuse what a build cached.
func sharedCacheDir(t *testing.T) string { return DefaultCacheDir() }

// TestRebuildAfterUnitChange builds the test recipe, changes one unit file
// and builds again: only the steps downstream of the unit may run, and the
// miss must name the unit.
func TestRebuildAfterUnitChange(t *testing.T) {
	requireTools(t, "mmdebstrap", "mksquashfs")
	if testing.Short() {
		t.Skip("builds an image")
	}
	tree := copyRecipeTree(t)
	cacheDir := sharedCacheDir(t)
	build := func() (string, *osimage.BuildManifest) {
		r, err := recipe.Load(filepath.Join(tree, "recipes/test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		m, err := Build(context.Background(), r, Options{
			OutputDir: filepath.Join(tree, "out"), CacheDir: cacheDir, Verbose: true, Progress: &log,
		})
		if err != nil {
			t.Fatalf("build: %v\n%s", err, log.String())
		}
		return log.String(), m
	}
	build() // warm (a hit when `make test-image` ran first)
	unit := filepath.Join(tree, "units/os-builder-hello.service")
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	// A new comment each run: the shared cache has seen every earlier one.
	touch := fmt.Sprintf("# touched by TestRebuildAfterUnitChange at %d\n", time.Now().UnixNano())
	if err := os.WriteFile(unit, append(b, touch...), 0o644); err != nil {
		t.Fatal(err)
	}
	log, m := build()
	for _, want := range []string{"bootstrap                      cached", "assemble: cache miss: inputs changed: unit:os-builder-hello.service"} {
		if !strings.Contains(log, strings.TrimSpace(want)) && !containsFields(log, want) {
			t.Errorf("rebuild log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "bootstrap                      built") {
		t.Errorf("bootstrap ran again after a unit change:\n%s", log)
	}
	// The manifest lists every artifact with a digest that matches its file.
	for _, a := range m.Artifacts {
		d, err := digestFile(filepath.Join(tree, "out", a.Path))
		if err != nil || d != a.SHA256 {
			t.Errorf("artifact %s: digest %s, manifest says %s (%v)", a.Path, d, a.SHA256, err)
		}
	}
	var onDisk osimage.BuildManifest
	raw, err := os.ReadFile(filepath.Join(tree, "out", osimage.ManifestFile))
	if err != nil || json.Unmarshal(raw, &onDisk) != nil {
		t.Fatalf("manifest.json unreadable: %v", err)
	}
	if onDisk.Packages["systemd"] == "" || onDisk.OSRelease["ID"] != "debian" {
		t.Errorf("manifest lacks package versions or os-release: %+v", onDisk.OSRelease)
	}
}

// containsFields matches want against log ignoring runs of spaces.
func containsFields(log, want string) bool {
	return strings.Contains(strings.Join(strings.Fields(log), " "), strings.Join(strings.Fields(want), " "))
}

// testRecipe loads the repository's test recipe.
func testRecipe(t *testing.T) *recipe.Recipe {
	t.Helper()
	r, err := recipe.Load(filepath.Join(repoRoot(t), "recipes/test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRelativeCacheDir: a relative --cache-dir becomes absolute before any
// path under it reaches a tool (mmdebstrap's pool hook runs in the tree it
// builds, where a relative path names nothing: the bootstrap failed).
func TestRelativeCacheDir(t *testing.T) {
	r := testRecipe(t)
	t.Chdir(t.TempDir())
	b, _, err := newBuild(r, Options{CacheDir: "cache", OutputDir: "out"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.log.Close()
	if !filepath.IsAbs(b.opts.CacheDir) {
		t.Errorf("cache directory %q is relative", b.opts.CacheDir)
	}
	if p := newDebPool(b.opts.CacheDir, "m", "r").dir; !filepath.IsAbs(p) {
		t.Errorf(".deb pool %q is relative", p)
	}
}
