package builder

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// TestReproducibleFromScratch builds the test recipe twice with no cache at
// all, into separate directories: every artifact must have the same sha256.
func TestReproducibleFromScratch(t *testing.T) {
	t.Parallel()
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs")
	if testing.Short() {
		t.Skip("builds an image twice from scratch")
	}
	build := func() *osimage.BuildManifest {
		r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(t), "recipes/test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		m, err := buildLane(context.Background(), r, Options{
			OutputDir: filepath.Join(dir, "out"), CacheDir: filepath.Join(dir, "cache"), NoCache: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := build(), build()
	sums := map[string]string{}
	for _, art := range a.Artifacts {
		sums[art.Path] = art.SHA256
	}
	if len(a.Artifacts) != len(b.Artifacts) {
		t.Fatalf("artifact lists differ: %d vs %d", len(a.Artifacts), len(b.Artifacts))
	}
	for _, art := range b.Artifacts {
		if sums[art.Path] != art.SHA256 {
			t.Errorf("%s differs between two builds: %s vs %s", art.Path, sums[art.Path], art.SHA256)
		}
	}
}
