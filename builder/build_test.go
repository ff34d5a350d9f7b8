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

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/filehash"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
	"github.com/ironcore-dev/os-builder/uki"
)

// TestRebuildAfterUnitChange builds the test recipe, changes one unit file
// and builds again: only the steps downstream of the unit may run, and the
// miss must name the unit.
func TestRebuildAfterUnitChange(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs")
	if testing.Short() {
		t.Skip("builds an image")
	}
	tree := buildertest.CopyRecipeTree(t)
	cacheDir := cache.DefaultDir()
	build := func() (string, *osimage.BuildManifest) {
		r, err := recipe.Load(filepath.Join(tree, "recipes/test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		m, err := buildLane(context.Background(), r, Options{
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
		d, err := filehash.SHA256(filepath.Join(tree, "out", a.Path))
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

// TestRelativeCacheDir: a relative --cache-dir becomes absolute before any
// path under it reaches a tool (mmdebstrap's pool hook runs in the tree it
// builds, where a relative path names nothing: the bootstrap failed).
func TestRelativeCacheDir(t *testing.T) {
	r := buildertest.TestRecipe(t)
	t.Setenv("OSB_SOURCE_DIR", buildertest.RepoRoot(t)) // the init's source, away from the tree
	t.Chdir(t.TempDir())
	b, err := prepare(context.Background(), r, Options{CacheDir: "cache", OutputDir: "out"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.log.Close()
	if !filepath.IsAbs(b.opts.CacheDir) {
		t.Errorf("cache directory %q is relative", b.opts.CacheDir)
	}
}

// TestSignedBuildNeedsCmdline: a signing build whose uki.efi would carry
// no .cmdline (nothing in kernel.cmdline, layers' cmdline or persist:) is
// refused before any step runs, naming kernel.cmdline; the same recipe
// with a command line is prepared.
func TestSignedBuildNeedsCmdline(t *testing.T) {
	keys := t.TempDir()
	buildertest.Must(t, uki.GenerateKey(keys, "cmdline test"))
	t.Setenv("OSB_SOURCE_DIR", buildertest.RepoRoot(t))
	for _, cmdline := range []string{"", "console=ttyS0"} {
		r := buildertest.TestRecipe(t)
		r.Kernel.Cmdline, r.Resolved = cmdline, nil
		b, err := prepare(context.Background(), r, Options{
			CacheDir: t.TempDir(), OutputDir: filepath.Join(t.TempDir(), "out"), Locked: true,
			SignKey: filepath.Join(keys, uki.KeyFile), SignCert: filepath.Join(keys, uki.CertFile),
		})
		if err == nil {
			b.log.Close()
		}
		refused := err != nil && strings.Contains(err.Error(), "kernel.cmdline")
		if refused != (cmdline == "") {
			t.Errorf("cmdline %q: err = %v, want a refusal naming kernel.cmdline exactly when it is empty", cmdline, err)
		}
	}
}
