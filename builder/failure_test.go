package builder

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/filehash"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// TestUnknownPackageNamesRecipeLine asks apt for a package Debian does not
// have: the error must point at the recipe line that asked for it.
func TestUnknownPackageNamesRecipeLine(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap")
	if testing.Short() {
		t.Skip("runs mmdebstrap")
	}
	tree := buildertest.CopyRecipeTree(t)
	layer := filepath.Join(tree, "recipes/layers/test-hello.yaml")
	b, err := os.ReadFile(layer)
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, "packages:\n  - osb-no-such-package\n"...)
	if err := os.WriteFile(layer, b, 0o644); err != nil {
		t.Fatal(err)
	}
	line := strings.Count(string(b), "\n") // the package is on the last line
	r, err := recipe.Load(filepath.Join(tree, "recipes/test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = buildLane(context.Background(), r, Options{OutputDir: filepath.Join(tree, "out"), CacheDir: t.TempDir(), NoCache: true})
	if err == nil {
		t.Fatal("build with an unknown package succeeded")
	}
	want := "test-hello.yaml:" + strconv.Itoa(line) + ": packages: unknown package \"osb-no-such-package\""
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error does not name the recipe line:\n got %v\nwant ...%s", err, want)
	}
	if _, statErr := os.Stat(filepath.Join(tree, "out")); !os.IsNotExist(statErr) {
		t.Errorf("a failed build left an output directory")
	}
}

// TestKilledBuildKeepsPreviousOutput kills `builder build` with SIGKILL in
// the middle of a step: the previous output must stay complete and
// untouched, no cache entry may be poisoned, and the next build must
// succeed and replace the output.
func TestKilledBuildKeepsPreviousOutput(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs")
	if testing.Short() {
		t.Skip("builds an image")
	}
	bin := filepath.Join(t.TempDir(), "builder")
	if err := command.Run(context.Background(), "go", "build", "-o", bin, "../cmd/builder"); err != nil {
		t.Fatal(err)
	}
	tree := buildertest.CopyRecipeTree(t)
	out := filepath.Join(tree, "out")
	cacheDir := cache.DefaultDir()
	recipePath := filepath.Join(tree, "recipes/test.yaml")
	build := func() *exec.Cmd {
		cmd := exec.Command(bin, "build", recipePath, "--output", out, "--cache-dir", cacheDir)
		cmd.Env = append(os.Environ(), "OSB_SOURCE_DIR="+buildertest.RepoRoot(t))
		return cmd
	}
	if b, err := build().CombinedOutput(); err != nil {
		t.Fatalf("first build: %v\n%s", err, b)
	}
	before, err := os.ReadFile(filepath.Join(out, osimage.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}

	// A changed unit makes assemble run again. Kill the build as soon as
	// it starts filling assemble's cache entry, then (assemble runs
	// again) as soon as the last writer starts filling the staging
	// directory: a one-unit rebuild takes a few seconds now, so the kill
	// comes on the step's own start line, not after a delay.
	unit := filepath.Join(tree, "units/os-builder-hello.service")
	ub, _ := os.ReadFile(unit)
	os.WriteFile(unit, append(ub, "# "+time.Now().String()+"\n"...), 0o644)
	for _, at := range []string{"assemble: start", "iso: start"} {
		cmd := build()
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stderr)
		seen := false
		for !seen && sc.Scan() {
			seen = strings.Contains(sc.Text(), at)
		}
		cmd.Process.Kill()
		cmd.Wait()
		if !seen {
			t.Fatalf("the build ended before %q", at)
		}
		after, err := os.ReadFile(filepath.Join(out, osimage.ManifestFile))
		if err != nil || string(after) != string(before) {
			t.Fatalf("the build killed at %q changed the previous output (err %v)", at, err)
		}
		var m osimage.BuildManifest
		if err := json.Unmarshal(after, &m); err != nil {
			t.Fatal(err)
		}
		for _, a := range m.Artifacts {
			if d, err := filehash.SHA256(filepath.Join(out, a.Path)); err != nil || d != a.SHA256 {
				t.Errorf("%s damaged by the kill at %q: %v", a.Path, at, err)
			}
		}
	}
	if b, err := build().CombinedOutput(); err != nil {
		t.Fatalf("build after the kill: %v\n%s", err, b)
	}
	final, _ := os.ReadFile(filepath.Join(out, osimage.ManifestFile))
	if string(final) == string(before) {
		t.Error("the build after the kill did not replace the output")
	}
	leftovers, _ := filepath.Glob(filepath.Join(tree, ".out.staging-*"))
	if len(leftovers) != 0 {
		t.Errorf("staging directories left behind: %v", leftovers)
	}
}
