package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/rootfs"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/recipe"
)

// BenchmarkBuildTestRecipe measures, side by side, the test recipe's cold
// build (empty cache), a warm rebuild with nothing changed, and a rebuild
// after touching one unit file. Run with -benchtime 1x (`make bench`).
func BenchmarkBuildTestRecipe(b *testing.B) {
	buildertest.RequireTools(b, "mmdebstrap", "mksquashfs")
	tree := b.TempDir()
	for _, d := range []string{"recipes", "units"} {
		if err := command.Run(context.Background(), "cp", "-a", filepath.Join(buildertest.RepoRoot(b), d), tree); err != nil {
			b.Fatal(err)
		}
	}
	cacheDir := filepath.Join(b.TempDir(), "cache")
	build := func(b *testing.B) {
		r, err := recipe.Load(filepath.Join(tree, "recipes/test.yaml"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := buildLane(context.Background(), r, Options{OutputDir: filepath.Join(tree, "out"), CacheDir: cacheDir}); err != nil {
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
	buildertest.RequireTools(b, "mmdebstrap", "mksquashfs")
	r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(b), "recipes/test.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	cacheDir := cache.DefaultDir() // what builds and tests filled
	warm := filepath.Join(b.TempDir(), "out")
	m, err := buildLane(context.Background(), r, Options{OutputDir: warm, CacheDir: cacheDir})
	if err != nil {
		b.Fatal(err)
	}
	// The writers' inputs, from the cache entries the build used.
	store, err := cache.Open(cacheDir)
	if err != nil {
		b.Fatal(err)
	}
	cfg, in := lastWriterInputs(b, store, r)
	var total int64
	for _, a := range m.Artifacts {
		total += a.Size
	}
	b.Run("assemble", func(b *testing.B) {
		b.SetBytes(total)
		for i := 0; i < b.N; i++ {
			dir := b.TempDir()
			for _, w := range artifacts.Writers(cfg, in, dir) {
				if _, err := w.Write(context.Background()); err != nil {
					b.Fatal(err)
				}
				w.Done()
			}
		}
	})
	b.Run("copy-floor", func(b *testing.B) {
		b.SetBytes(total)
		for i := 0; i < b.N; i++ {
			dir := b.TempDir()
			for _, a := range m.Artifacts {
				if err := command.Run(context.Background(), "cp", filepath.Join(warm, a.Path), filepath.Join(dir, a.Path)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// lastWriterInputs finds the cached step outputs the last build of r used
// and hands them to the writers as its table would.
func lastWriterInputs(b *testing.B, store *cache.Store, r *recipe.Recipe) (artifacts.Config, artifacts.Inputs) {
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
	stack := step.Stack{}.On(rootfs.BaseLayer(dir("bootstrap")), "")
	for _, l := range r.Resolved {
		if len(l.Go)+len(l.OCI) > 0 { // the build had a binaries layer
			stack = stack.On(rootfs.BinariesLayer(dir("binaries")), "")
			break
		}
	}
	in := artifacts.Inputs{
		Stack:     step.NewValue[step.Stack]("assemble", "the root's layers"),
		Assembled: step.NewValue[step.Assembled]("assemble", "os-release, the stub, the init's tools"),
		Kernel:    step.NewValue[step.Kernel]("kernel", "the kernel and its modules"),
		NoRoot:    step.NewValue[string]("initrd-noroot", "the initrd without root"),
	}
	in.Stack.Set(stack.On(rootfs.TopLayer(dir("assemble")), ""))
	in.Assembled.Set(step.Assembled{Dir: dir("assemble")})
	in.Kernel.Set(step.Kernel{Dir: dir("kernel")})
	in.NoRoot.Set(rootfs.Initrd(dir("initrd-noroot")))
	cfg := artifacts.Config{
		Outputs: r.OutputSet(), Cmdline: r.Cmdline(), Epoch: DefaultSourceDateEpoch,
		Name: r.Name, Version: r.Version, Arch: r.Base.Architecture, Builder: "bench",
	}
	return cfg, in
}

// BenchmarkNothingChanged measures a build whose output is up to date:
// the input key, the manifest and one lstat per artifact, no step and no
// write. The hypervisor case uses $OSB_BENCH_HYPERVISOR_OUT (default a
// temporary directory), filled once outside the timer from the shared
// cache.
func BenchmarkNothingChanged(b *testing.B) {
	buildertest.RequireTools(b, "mmdebstrap", "mksquashfs")
	cacheDir := cache.DefaultDir()
	for _, tc := range []struct {
		name, recipe, outEnv string
		exclude              []string
	}{
		{"test", "recipes/test.yaml", "", nil},
		{"hypervisor", "recipes/hypervisor.yaml", "OSB_BENCH_HYPERVISOR_OUT", []string{"dpservice"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			load := func() *recipe.Recipe {
				r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(b), tc.recipe))
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
			first, err := buildLane(context.Background(), load(), opts)
			if err != nil {
				b.Fatal(err)
			}
			var size int64
			for _, a := range first.Artifacts {
				size += a.Size
			}
			var log strings.Builder
			opts.Progress, opts.ProgressMode = &log, progress.ModePlain
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				log.Reset()
				if _, err := buildLane(context.Background(), load(), opts); err != nil {
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

// BenchmarkArchitectures builds the multi-architecture test recipe cold
// (an empty step cache, the .debs hard-linked from the default cache's
// pool, which make test-image fills, so the mirror is not timed) side by
// side: amd64 alone, arm64 alone (its maintainer scripts under qemu-user on
// an amd64 host), and both in one command, whose lanes share the cores.
// Run with -benchtime 1x (`make bench`).
func BenchmarkArchitectures(b *testing.B) {
	buildertest.RequireTools(b, "mmdebstrap", "mksquashfs")
	r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(b), "recipes/test-multiarch.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	pool := filepath.Join(cache.DefaultDir(), "debs")
	cpus := map[string]time.Duration{} // by architectures, joined with +
	build := func(b *testing.B, archs ...string) time.Duration {
		cacheDir := filepath.Join(b.TempDir(), "cache")
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			b.Fatal(err)
		}
		if _, err := os.Stat(pool); err == nil {
			if err := command.Run(context.Background(), "cp", "-al", pool, cacheDir); err != nil {
				b.Fatal(err)
			}
		}
		settle(b)
		start, cpu0 := time.Now(), cpuTime()
		lanes, err := Lanes(r, archs, Options{OutputDir: filepath.Join(b.TempDir(), "out"), CacheDir: cacheDir})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Build(context.Background(), lanes...); err != nil {
			b.Fatal(err)
		}
		wall, cpu := time.Since(start), cpuTime()-cpu0
		b.ReportMetric(cpu.Seconds(), "cpu-s")
		cpus[strings.Join(archs, "+")] = cpu
		return wall
	}
	took := map[string]time.Duration{}
	for _, tc := range []struct {
		name  string
		archs []string
	}{
		{"amd64", []string{"amd64"}},
		{"arm64", []string{"arm64"}},
		{"both", []string{"amd64", "arm64"}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				took[tc.name] = build(b, tc.archs...)
			}
		})
	}
	a, m, both := took["amd64"].Seconds(), took["arm64"].Seconds(), took["both"].Seconds()
	if a > 0 && m > 0 && both > 0 {
		// What both lanes cost in CPU, spread over every core: no schedule
		// of the one command beats it.
		floor := (cpus["amd64"] + cpus["arm64"]).Seconds() / float64(runtime.NumCPU())
		b.Logf("cold: amd64 %.0fs, arm64 %.0fs (%.2f× amd64); both in one command %.0fs, %.2f of the two one after another (%.0fs); CPU time amd64 %.0fs, arm64 %.0fs, both %.0fs: floor on %d CPUs %.0fs (%.2f)",
			a, m, m/a, both, both/(a+m), a+m, cpus["amd64"].Seconds(), cpus["arm64"].Seconds(), cpus["amd64+arm64"].Seconds(), runtime.NumCPU(), floor, floor/(a+m))
	}
}

// cpuTime is the user and system time of this process and of every
// child it has waited for (mmdebstrap, qemu-user, mksquashfs, ...).
func cpuTime() time.Duration {
	var self, children syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(children.Utime) + tv(children.Stime)
}
