package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/recipe"
)

// BenchmarkBuildTestRecipe measures, side by side, the test recipe's cold
// build (empty cache), a warm rebuild with nothing changed, and a rebuild
// after touching one unit file. Run with -benchtime 1x (`make bench`).
func BenchmarkBuildTestRecipe(b *testing.B) {
	requireTools(b, "mmdebstrap", "mksquashfs")
	tree := b.TempDir()
	for _, d := range []string{"recipes", "units"} {
		if err := run(context.Background(), "cp", "-a", filepath.Join(repoRoot(b), d), tree); err != nil {
			b.Fatal(err)
		}
	}
	cacheDir := filepath.Join(b.TempDir(), "cache")
	build := func(b *testing.B) {
		r, err := recipe.Load(filepath.Join(tree, "recipes/test.yaml"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Build(context.Background(), r, Options{OutputDir: filepath.Join(tree, "out"), CacheDir: cacheDir}); err != nil {
			b.Fatal(err)
		}
	}
	var cold, warm, touched time.Duration
	b.Run("cold", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			os.RemoveAll(cacheDir)
			start := time.Now()
			build(b)
			cold = time.Since(start)
		}
	})
	b.Run("warm", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			start := time.Now()
			build(b)
			warm = time.Since(start)
		}
	})
	b.Run("touch-unit", func(b *testing.B) {
		unit := filepath.Join(tree, "units/os-builder-hello.service")
		for i := 0; i < b.N; i++ {
			data, _ := os.ReadFile(unit)
			os.WriteFile(unit, append(data, fmt.Sprintf("# bench %d %d\n", i, time.Now().UnixNano())...), 0o644)
			start := time.Now()
			build(b)
			touched = time.Since(start)
		}
	})
	if cold > 0 {
		b.Logf("cold %.1fs, warm %.1fs (%.3f of cold), touched unit %.1fs (%.3f of cold)",
			cold.Seconds(), warm.Seconds(), warm.Seconds()/cold.Seconds(), touched.Seconds(), touched.Seconds()/cold.Seconds())
	}
}
