package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/cache"
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
			settle(b)
			start := time.Now()
			build(b)
			cold = time.Since(start)
		}
	})
	b.Run("warm", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			settle(b)
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
			settle(b)
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

// settle writes back what the build before left dirty, outside the
// timer: builds do not sync their output, and its write-back is not the
// next build's cost.
func settle(b *testing.B) {
	b.StopTimer()
	syscall.Sync()
	b.StartTimer()
}

// BenchmarkArtifacts assembles every artifact of the test recipe from its
// cached root tree (kernel, initrds, root image, stub), next to copying the
// same number of bytes: the physical floor.
func BenchmarkArtifacts(b *testing.B) {
	requireTools(b, "mmdebstrap", "mksquashfs")
	r, err := recipe.Load(filepath.Join(repoRoot(b), "recipes/test.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	cacheDir := DefaultCacheDir() // what builds and tests filled
	warm := filepath.Join(b.TempDir(), "out")
	m, err := Build(context.Background(), r, Options{OutputDir: warm, CacheDir: cacheDir})
	if err != nil {
		b.Fatal(err)
	}
	// Rebuild the inputs writeArtifacts takes from the cache entries.
	store, err := cache.Open(cacheDir)
	if err != nil {
		b.Fatal(err)
	}
	in := lastArtifactInputs(b, store, r)
	outputs, _ := parseOutputs(r.Outputs)
	var total int64
	for _, a := range m.Artifacts {
		total += a.Size
	}
	b.Run("assemble", func(b *testing.B) {
		b.SetBytes(total)
		for i := 0; i < b.N; i++ {
			dir := b.TempDir()
			if _, err := writeArtifacts(context.Background(), outputs, in, dir); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy-floor", func(b *testing.B) {
		b.SetBytes(total)
		for i := 0; i < b.N; i++ {
			dir := b.TempDir()
			for _, a := range m.Artifacts {
				if err := copyFile(filepath.Join(warm, a.Path), filepath.Join(dir, a.Path), 0o644); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// lastArtifactInputs finds the cached assemble and initrd outputs the last
// build of r used.
func lastArtifactInputs(b *testing.B, store *cache.Store, r *recipe.Recipe) *artifactInputs {
	dir := func(step string) string {
		in, ok := store.Previous(r.Name, step)
		if !ok {
			b.Fatalf("no cached %s step", step)
		}
		p, ok := store.Lookup(in.Key())
		if !ok {
			b.Fatalf("cached %s step is gone", step)
		}
		return p
	}
	layers := []rootLayer{{dir("bootstrap"), baseLayerInitrd}}
	for _, l := range r.Resolved {
		if len(l.Go)+len(l.OCI) > 0 { // the build had a binaries layer
			layers = append(layers, rootLayer{dir("binaries"), binariesLayerInitrd})
			break
		}
	}
	return &artifactInputs{
		layers:       append(layers, rootLayer{dir("assemble"), topLayerInitrd}),
		assembled:    dir("assemble"),
		kernelDir:    dir("kernel"),
		noRootInitrd: filepath.Join(dir("initrd-noroot"), initrdFile),
		cmdline:      r.Cmdline(),
		epoch:        DefaultSourceDateEpoch,
		name:         r.Name,
		version:      r.Version,
		arch:         r.Base.Architecture,
	}
}

// BenchmarkNothingChanged measures a build whose output is up to date:
// the input key, the manifest and one lstat per artifact, no step and no
// write. The hypervisor case uses $OSB_BENCH_HYPERVISOR_OUT (default a
// temporary directory), filled once outside the timer from the shared
// cache.
func BenchmarkNothingChanged(b *testing.B) {
	requireTools(b, "mmdebstrap", "mksquashfs")
	cacheDir := DefaultCacheDir()
	for _, tc := range []struct {
		name, recipe, outEnv string
		exclude              []string
	}{
		{"test", "recipes/test.yaml", "", nil},
		{"hypervisor", "recipes/hypervisor.yaml", "OSB_BENCH_HYPERVISOR_OUT", []string{"dpservice"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			load := func() *recipe.Recipe {
				r, err := recipe.Load(filepath.Join(repoRoot(b), tc.recipe))
				if err != nil {
					b.Fatal(err)
				}
				if len(tc.exclude) > 0 {
					if err := r.ExcludeLayers(tc.exclude...); err != nil {
						b.Fatal(err)
					}
				}
				return r
			}
			out := os.Getenv(tc.outEnv)
			if out == "" {
				out = filepath.Join(b.TempDir(), "out")
			}
			opts := Options{OutputDir: out, CacheDir: cacheDir}
			first, err := Build(context.Background(), load(), opts)
			if err != nil {
				b.Fatal(err)
			}
			var size int64
			for _, a := range first.Artifacts {
				size += a.Size
			}
			var log strings.Builder
			opts.Progress, opts.ProgressMode = &log, ModePlain
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				log.Reset()
				if _, err := Build(context.Background(), load(), opts); err != nil {
					b.Fatal(err)
				}
				if !strings.Contains(log.String(), "nothing changed") {
					b.Fatalf("the build ran:\n%s", log.String())
				}
			}
			b.ReportMetric(float64(size)/(1<<20), "MiB-of-artifacts")
		})
	}
}

// BenchmarkBootstrap runs the bootstrap step for the test recipe's package
// set side by side: every .deb downloaded (an empty deb pool) and every
// .deb from the pool the first run filled (the step ends with its base
// layer image squashed, image-MiB). Run with -benchtime 1x (`make bench`).
func BenchmarkBootstrap(b *testing.B) {
	requireTools(b, "mmdebstrap")
	r, err := recipe.Load(filepath.Join(repoRoot(b), "recipes/test.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	outputs, err := parseOutputs(r.Outputs)
	if err != nil {
		b.Fatal(err)
	}
	pkgs := (&build{r: r}).packages(outputs)
	var pool *debPool
	var last string
	step := func(b *testing.B, p *debPool) time.Duration {
		out := b.TempDir()
		s := &bootstrapStep{r: r, packages: pkgs, epoch: DefaultSourceDateEpoch, debs: p, work: b.TempDir(), logf: b.Logf}
		start := time.Now()
		if err := s.Run(context.Background(), out); err != nil {
			b.Fatal(err)
		}
		last = out
		return time.Since(start)
	}
	var cold, warm time.Duration
	b.Run("download-all", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			pool = newDebPool(b.TempDir(), r.Base.Mirror, r.Base.Release)
			cold = step(b, pool)
		}
		b.StopTimer()
		if fi, err := os.Stat(filepath.Join(last, layerImage)); err == nil {
			b.ReportMetric(float64(fi.Size())/(1<<20), "image-MiB")
		}
	})
	b.Run("pool", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			warm = step(b, pool)
		}
	})
	if cold > 0 && warm > 0 {
		b.Logf("bootstrap: every .deb downloaded %.1fs, .debs from the pool %.1fs (%.3f)", cold.Seconds(), warm.Seconds(), warm.Seconds()/cold.Seconds())
	}
}
