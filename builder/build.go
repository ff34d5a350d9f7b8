// Package builder turns a resolved recipe into boot artifacts. A build is
// one table of nodes (table.go): cacheable steps (bootstrap, go/oci sources,
// init, assemble, kernel, initrd: packages sources and rootfs) and artifact
// writers (package artifacts), each naming the typed values it needs from
// the nodes before it. The graph runs them concurrently where they share
// nothing (package graph); the output directory is staged aside and
// swapped into place only when every artifact and the manifest are
// complete.
package builder

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/graph"
	"github.com/ironcore-dev/os-builder/builder/hostarch"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/sources"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/internal/keyvalue"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
	"github.com/ironcore-dev/os-builder/uki"
)

// prepare is the start of Build and PlanBuild: it checks the options,
// opens the cache, loads the signer, pins every source (recipe, lock or
// resolved) and makes the build's input key. The caller closes b.log.
func prepare(ctx context.Context, r *recipe.Recipe, opts Options) (*buildRun, error) {
	epoch, err := opts.epoch()
	if err != nil {
		return nil, err
	}
	if opts.OutputDir == "" {
		return nil, errors.New("no output directory") // Lane.withDefaults sets it
	}
	if opts.CacheDir == "" {
		opts.CacheDir = cache.DefaultDir()
	}
	// Absolute: paths under it reach tools that run elsewhere (mmdebstrap's
	// hooks run in the tree they build).
	if opts.CacheDir, err = filepath.Abs(opts.CacheDir); err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	if opts.Jobs <= 0 {
		opts.Jobs = runtime.NumCPU()
	}
	if opts.MemMiB <= 0 {
		opts.MemMiB = availableMiB()
	}
	exe, err := executableDigest()
	if err != nil {
		return nil, fmt.Errorf("builder executable: %w", err)
	}
	store, err := cache.Open(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	log := opts.reporter
	if log == nil {
		log = progress.New(opts.Progress, opts.Verbose, opts.ProgressMode)
	}
	store.Log = log.Infof
	b := &buildRun{r: r, opts: opts, epoch: epoch, log: log, store: store, exe: exe}
	b.art = artifacts.Config{
		Outputs: r.OutputSet(),
		Cmdline: b.cmdline(),
		Epoch:   epoch,
		Name:    r.Name, Version: r.Version, Arch: r.Base.Architecture,
		DataMiB: int64(r.DataSizeMiB()),
		Builder: exe,
	}
	if opts.SignKey != "" || opts.SignCert != "" {
		if b.art.Signer, b.art.Cert, err = uki.LoadSigner(opts.SignKey, opts.SignCert); err != nil {
			log.Close()
			return nil, fmt.Errorf("secure boot key: %w", err)
		}
	}
	if err := b.art.CheckSigning(); err != nil {
		log.Close()
		return nil, fmt.Errorf("secure boot: %w", err)
	}
	if b.r, b.pinned, err = sources.PinSources(ctx, r, opts.Locked, log.Infof); err != nil {
		log.Close()
		return nil, err
	}
	if b.key, err = b.inputKey(); err != nil {
		log.Close()
		return nil, err
	}
	return b, nil
}

// A Lane is one architecture's build of a recipe: the recipe resolved
// for that architecture (recipe.ForArchitecture) and the options it builds
// with, its output directory among them. Lanes makes a recipe's; Build and
// PlanBuild take any number.
type Lane struct {
	Recipe  *recipe.Recipe
	Options Options
}

// withDefaults is l with its output directory defaulted to out/NAME, the
// one place that default is set.
func (l Lane) withDefaults() Lane {
	if l.Options.OutputDir == "" {
		l.Options.OutputDir = filepath.Join("out", l.Recipe.Name)
	}
	return l
}

// Lanes are the recipe's lanes for archs (none: every architecture it
// names), in archs' order: one architecture builds into opts.OutputDir
// itself, several into its ARCH subdirectory each.
func Lanes(r *recipe.Recipe, archs []string, opts Options) ([]Lane, error) {
	if len(archs) == 0 {
		archs = r.Architectures()
	}
	base := Lane{Recipe: r, Options: opts}.withDefaults().Options.OutputDir
	var lanes []Lane
	for i, a := range archs {
		if slices.Index(archs, a) < i {
			return nil, fmt.Errorf("architecture %s named twice", a)
		}
		ra, err := r.ForArchitecture(a)
		if err != nil {
			return nil, err
		}
		l := Lane{Recipe: ra, Options: opts}
		l.Options.OutputDir = base
		if len(archs) > 1 {
			l.Options.OutputDir = filepath.Join(base, a)
		}
		lanes = append(lanes, l)
	}
	return lanes, nil
}

// Build builds the lanes in one graph, each lane's steps side by side
// (its nodes named ARCH/STEP when there are several), and returns the
// manifest of each output directory in lanes' order. A lane whose output
// directory already holds what it makes (same input key, artifacts
// unchanged) writes nothing and returns that directory's manifest.
func Build(ctx context.Context, lanes ...Lane) ([]*osimage.BuildManifest, error) {
	ms := make([]*osimage.BuildManifest, len(lanes))
	var runs []*buildRun
	var log *progress.Reporter
	for _, l := range lanes {
		l = l.withDefaults()
		r, o := l.Recipe, l.Options
		// The swap at the end deletes what the output held: refuse now,
		// not after an hour of building (and before touching the cache).
		if err := CheckOutputDir(o.OutputDir); err != nil {
			return nil, err
		}
		o.reporter = log
		b, err := prepare(ctx, r, o)
		if err != nil {
			return nil, err
		}
		if log == nil {
			log = b.log
			defer log.Close()
			began := time.Now()
			defer func() { log.PrintSummary(time.Since(began)) }()
		}
		if len(lanes) > 1 {
			b.prefix = r.Base.Architecture + "/"
		}
		runs = append(runs, b)
	}
	var todo []*buildRun
	var index []int
	for i, b := range runs {
		if !b.opts.NoCache {
			m, ok, err := upToDate(b.opts.OutputDir, b.key, b.store, b.opts.Verify, true)
			if err != nil {
				return nil, err
			}
			if ok {
				log.Infof("nothing changed: %s is up to date (input key %.12s)", b.opts.OutputDir, b.key)
				ms[i] = m
				continue
			}
		}
		todo = append(todo, b)
		index = append(index, i)
	}
	for _, b := range todo {
		// A foreign architecture this host cannot run (no qemu-user
		// through binfmt_misc) fails now, not minutes into mmdebstrap.
		if err := hostarch.Check(b.r.Base.Architecture); err != nil {
			return nil, err
		}
		// An unreachable image source must fail now, not after the long
		// steps.
		if err := sources.PreflightOCI(ctx, b.r, b.opts.CacheDir); err != nil {
			return nil, err
		}
	}
	for _, b := range todo {
		// The work directory is locked, not named by PID: a build
		// sweeping the shared cache from another PID namespace must see
		// it as live.
		tmp, err := b.store.NewTemp("work")
		if err != nil {
			return nil, err
		}
		defer tmp.Remove()
		b.work = tmp.Path
		b.run = step.Plain{Work: tmp.Path}
		if !b.opts.NoCache {
			b.run = cachedRunner{store: b.store, scope: b.r.Name + strings.TrimSuffix("/"+b.prefix, "/"), log: b.log}
			rr, err := b.withRemote(ctx, b.run)
			if err != nil {
				return nil, err
			}
			if rr != nil {
				b.run = rr
				defer b.waitRemote(rr)
			}
		}
	}
	built, err := runLanes(ctx, todo)
	if err != nil {
		return nil, err
	}
	for i, m := range built {
		ms[index[i]] = m
	}
	return ms, nil
}

// stagedLane is a running lane: its run, its staging directory, its nodes
// (named with the run's prefix) and their results.
type stagedLane struct {
	b      *buildRun
	final  string
	out    staged
	unlock func()
	ns     []node
	v      *values
	res    *results
}

// openLane stages b's output directory and lays out its table.
func (b *buildRun) openLane() (*stagedLane, error) {
	final, err := filepath.Abs(b.opts.OutputDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return nil, err
	}
	removeStaleStaging(final)
	stage, unlock, err := newStaging(final)
	if err != nil {
		return nil, fmt.Errorf("output %s: %w", final, err)
	}
	l := &stagedLane{b: b, final: final, out: staged{dir: stage}, unlock: unlock}
	if !b.opts.NoCache {
		l.out.prev = readPreviousOutput(b.store, final)
	}
	l.ns, l.v = b.table(stage)
	l.res = &results{arts: map[string][]osimage.Artifact{}, sizes: map[string]int64{}, keys: map[string]string{}}
	return l, nil
}

func (l *stagedLane) close() {
	os.RemoveAll(l.out.dir)
	l.unlock()
}

// finish writes the lane's manifest and swaps its output into place.
func (l *stagedLane) finish() (*osimage.BuildManifest, error) {
	var arts []osimage.Artifact
	for _, n := range l.ns {
		if n.writer != nil {
			arts = append(arts, l.res.arts[l.b.prefix+n.name]...)
		}
	}
	artifacts.Sort(arts)
	if err := artifacts.RemoveAside(l.out.dir); err != nil {
		return nil, err
	}
	return l.b.publish(arts, l.v, l.res.keys, l.out.dir, l.final)
}

// graphNode is n's name and dependencies in the graph: with the run's
// prefix (ARCH/) when the graph holds several architectures.
func (b *buildRun) graphNode(n node) (string, []string) {
	deps := n.deps()
	for i := range deps {
		deps[i] = b.prefix + deps[i]
	}
	return b.prefix + n.name, deps
}

// laneJobs is the job slots a node of one of lanes architectures takes:
// at most its share of the slots, so that a step wanting two (assemble)
// does not wait, on two cores, for the other architecture's bootstrap
// (minutes, when it is emulated) to free the second.
func laneJobs(jobs, slots, lanes int) int {
	return max(1, min(jobs, slots/lanes))
}

// runLanes runs every run's table in one graph and publishes each output.
func runLanes(ctx context.Context, runs []*buildRun) ([]*osimage.BuildManifest, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	var lanes []*stagedLane
	defer func() {
		for _, l := range lanes {
			l.close()
		}
	}()
	g := graph.New()
	byNode := map[string]*results{}
	for _, b := range runs {
		l, err := b.openLane()
		if err != nil {
			return nil, err
		}
		lanes = append(lanes, l)
		for _, n := range l.ns {
			var deps []string
			n.name, deps = b.graphNode(n)
			byNode[n.name] = l.res
			if err := g.Add(graph.Node{Name: n.name, Deps: deps, Jobs: laneJobs(n.jobs, b.opts.Jobs, len(runs)), MemMiB: n.mem, Run: b.runNode(n, l.res, l.out)}); err != nil {
				return nil, err
			}
		}
	}
	b0 := runs[0]
	err := g.Run(ctx, graph.Options{
		Jobs: b0.opts.Jobs, MemMiB: b0.opts.MemMiB,
		Start: b0.log.BeginStep,
		Finish: func(name string, err error) {
			res := byNode[name]
			res.mu.Lock()
			size := res.sizes[name]
			for _, a := range res.arts[name] {
				size += a.Size
			}
			res.mu.Unlock()
			b0.log.EndStep(name, err, size)
		},
	})
	if err != nil {
		return nil, err
	}
	var ms []*osimage.BuildManifest
	for _, l := range lanes {
		m, err := l.finish()
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	return ms, nil
}

// runNode is how the graph runs one node: a cached step through the
// runner, an artifact writer into the staging directory.
// staged is the staging directory the writers write into, and what the
// previous output offers them.
type staged struct {
	dir  string
	prev *previousOutput
}

func (b *buildRun) runNode(n node, res *results, out staged) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ctx = progress.WithMeter(ctx, b.log, n.name)
		if w := n.writer; w != nil {
			arts, key, err := b.writeOrReuse(ctx, n.name, w, out)
			if err != nil {
				return err
			}
			w.Done()
			res.mu.Lock()
			res.arts[n.name] = arts
			for _, name := range w.Ships {
				if key != "" {
					res.keys[name] = key
				}
			}
			res.mu.Unlock()
			return nil
		}
		s, err := n.step()
		if err != nil {
			return err
		}
		dir, err := b.run.Run(ctx, s)
		if err == nil {
			size := progress.DirSize(dir)
			res.mu.Lock()
			res.sizes[n.name] = size
			res.mu.Unlock()
			err = n.done(s, dir)
		}
		if err != nil && ctx.Err() != nil {
			// Stopped because another step failed: say so, whatever the
			// tool said as it died.
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		if err != nil && n.layer != "" {
			return fmt.Errorf("layer %s: %w", n.layer, err)
		}
		return err
	}
}

// writeOrReuse runs the writer w, or takes what it would write from the
// previous output when its key matches there. It returns the writer's key
// ("" without a cache: inputs are not named by keys then).
func (b *buildRun) writeOrReuse(ctx context.Context, name string, w *artifacts.Writer, out staged) ([]osimage.Artifact, string, error) {
	var key string
	if !b.opts.NoCache && len(w.Ships) > 0 {
		var err error
		if key, err = w.Key(); err != nil {
			return nil, "", fmt.Errorf("%s: %w", name, err)
		}
		b.log.SetKey(name, key)
		arts, err := out.prev.reuse(out.dir, key, w.Ships)
		if err == nil {
			b.log.Cached(name)
			b.log.Infof("%s: reused %s from the previous output (same inputs)", name, strings.Join(w.Ships, ", "))
			return arts, key, nil
		}
		if !errors.Is(err, errNotReusable) {
			b.log.Infof("warning: %s: %v (writing it)", name, err)
		}
	}
	stop := progress.WatchBytes(ctx, w.Size(), w.Files...)
	arts, err := w.Write(ctx)
	stop()
	return arts, key, err
}

// publish writes the manifest into the staging directory and swaps it
// into place in one rename.
func (b *buildRun) publish(arts []osimage.Artifact, v *values, keys map[string]string, stage, final string) (*osimage.BuildManifest, error) {
	m, err := b.manifest(arts, v)
	if err != nil {
		return nil, err
	}
	m.InputKey = b.key
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	if err := os.WriteFile(filepath.Join(stage, osimage.ManifestFile), data, 0o644); err != nil {
		return nil, err
	}
	if err := os.Chmod(stage, 0o755); err != nil {
		return nil, err
	}
	if err := CheckOutputDir(final); err != nil {
		return nil, err // filled while this build ran
	}
	if err := swapInto(stage, final); err != nil {
		return nil, fmt.Errorf("output %s: %w", final, err)
	}
	if b.key != "" {
		// Only the swap moved the files, and a rename keeps their
		// identity: seal them where they now are.
		if err := writeSeal(b.store, final, data, m.Artifacts, keys); err != nil {
			b.log.Infof("warning: %v (the next build hashes the output to see that nothing changed)", err)
		}
	}
	b.log.Infof("wrote %s", b.opts.OutputDir)
	return m, nil
}

func (b *buildRun) manifest(arts []osimage.Artifact, v *values) (*osimage.BuildManifest, error) {
	assembled := v.assembled.Get()
	// Read inside the assemble step's directory, as the UKI's is.
	raw, err := fsroot.ReadPath(assembled.OSRelease(), 1<<20)
	if err != nil {
		return nil, fmt.Errorf("os-release: %w", err)
	}
	osr, err := keyvalue.Parse(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("os-release: %w", err)
	}
	pkgs, err := readPackages(v.packages.Get())
	if err != nil {
		return nil, err
	}
	initMeta, err := sources.InitInfo(v.init.Get())
	if err != nil {
		return nil, err
	}
	progs, err := artifacts.GoPrograms(v.binaries(), v.init.Get())
	if err != nil {
		return nil, err
	}
	var layers []string
	for _, l := range b.r.Resolved {
		layers = append(layers, l.Name)
	}
	return &osimage.BuildManifest{
		Recipe:          b.r.Name,
		Version:         b.r.Version,
		Architecture:    b.r.Base.Architecture,
		SourceDateEpoch: b.epoch,
		Cmdline:         b.art.Cmdline,
		OSRelease:       osr,
		Layers:          layers,
		ExcludedLayers:  b.r.Exclude,
		Packages:        pkgs,
		Sources:         b.pinned,
		Init:            initMeta,
		GoPrograms:      progs,
		Prune:           manifestPrune(b.r),
		OCISources:      artifacts.OCISources(b.r),
		Artifacts:       arts,
		SecureBoot:      artifacts.SecureBoot(b.art, assembled, arts),
		NoImageV2:       b.r.ImageV2 != nil && !*b.r.ImageV2,
	}, nil
}

// manifestPrune is r's effective prune lists, nil when it prunes nothing.
func manifestPrune(r *recipe.Recipe) *osimage.Prune {
	p := &osimage.Prune{Exclude: r.PruneExclude(), Include: r.PruneInclude(), Remove: r.PruneRemove()}
	if len(p.Exclude)+len(p.Include)+len(p.Remove) == 0 {
		return nil
	}
	return p
}

func readPackages(path string) (map[string]string, error) {
	b, err := fsroot.ReadPath(path, 64<<20) // inside the bootstrap step's directory
	if err != nil {
		return nil, fmt.Errorf("package list: %w", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if p, v, ok := strings.Cut(line, "\t"); ok {
			m[p] = v
		}
	}
	return m, nil
}
