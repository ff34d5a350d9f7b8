// Package builder turns a resolved recipe into boot artifacts. A build is a
// graph of cacheable steps (bootstrap, go/oci sources, init, assemble,
// initrds) and artifact writers, run concurrently where they share nothing
// (package graph); the output directory is staged aside and swapped into
// place only when every artifact and the manifest are complete.
package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/builder/graph"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
	"github.com/ironcore-dev/os-builder/uki"
)

// DefaultSourceDateEpoch is used when SOURCE_DATE_EPOCH is unset, so that
// builds are reproducible by default (2025-01-01T00:00:00Z).
const DefaultSourceDateEpoch = 1735689600

// Options control one build.
type Options struct {
	// OutputDir receives the artifacts; default out/<recipe name>.
	OutputDir string
	// CacheDir holds step outputs; default DefaultCacheDir().
	CacheDir string
	// NoCache runs every step, neither reading nor filling the cache.
	NoCache bool
	// Verbose explains cache misses.
	Verbose bool
	// Progress receives progress lines; nil for silence.
	Progress io.Writer
	// ProgressMode is ModeAuto, ModePlain or ModeJSON.
	ProgressMode string
	// Jobs bounds the steps running at once (a Go build or a squashfs
	// write counts as one or more); 0 means the number of cores.
	Jobs int
	// MemMiB bounds the memory the running steps may need together; 0
	// means what the kernel reports available when the build starts.
	MemMiB int
	// Verify makes the nothing-changed check hash every artifact instead
	// of trusting their recorded identity (see upToDate).
	Verify bool
	// SignKey and SignCert (PEM paths) sign the UKIs for Secure Boot.
	SignKey, SignCert string
	// SourceDateEpoch fixes every timestamp; 0 means $SOURCE_DATE_EPOCH or
	// DefaultSourceDateEpoch.
	SourceDateEpoch int64
	// Locked builds only sources the recipe's lock pins (see PinSources).
	Locked bool
	// Init supplies the initrd's init; nil builds it from source
	// (initrd.SourceInit). cmd/builder passes the init it carries.
	Init InitSource
}

// DefaultCacheDir is $OSB_CACHE_DIR, else $XDG_CACHE_HOME/os-builder, else
// ~/.cache/os-builder.
func DefaultCacheDir() string {
	if d := os.Getenv("OSB_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "os-builder")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "os-builder")
	}
	return filepath.Join(os.TempDir(), "os-builder-cache")
}

func (o *Options) epoch() (int64, error) {
	if o.SourceDateEpoch != 0 {
		return o.SourceDateEpoch, nil
	}
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		e, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a number of seconds", s)
		}
		return e, nil
	}
	return DefaultSourceDateEpoch, nil
}

// newBuild checks the options and opens the cache; the caller closes the
// reporter.
func newBuild(r *recipe.Recipe, opts Options) (*build, *cache.Store, error) {
	epoch, err := opts.epoch()
	if err != nil {
		return nil, nil, err
	}
	if opts.OutputDir == "" {
		opts.OutputDir = filepath.Join("out", r.Name)
	}
	if opts.CacheDir == "" {
		opts.CacheDir = DefaultCacheDir()
	}
	// Absolute: paths under it reach tools that run elsewhere (mmdebstrap's
	// hooks run in the tree they build).
	if opts.CacheDir, err = filepath.Abs(opts.CacheDir); err != nil {
		return nil, nil, fmt.Errorf("cache directory: %w", err)
	}
	if opts.Jobs <= 0 {
		opts.Jobs = runtime.NumCPU()
	}
	if opts.MemMiB <= 0 {
		opts.MemMiB = availableMiB()
	}
	outputs, err := parseOutputs(r.Outputs)
	if err != nil {
		return nil, nil, err
	}
	store, err := cache.Open(opts.CacheDir)
	if err != nil {
		return nil, nil, err
	}
	log := NewReporterMode(opts.Progress, opts.Verbose, opts.ProgressMode)
	store.Log = log.Infof
	return &build{r: r, opts: opts, epoch: epoch, outputs: outputs, log: log, store: store}, store, nil
}

// Build runs the recipe and returns the manifest of the output directory.
// When the output directory already holds what the recipe makes (same
// input key, artifacts unchanged) it writes nothing and returns its
// manifest.
func Build(ctx context.Context, r *recipe.Recipe, opts Options) (*osimage.BuildManifest, error) {
	if opts.OutputDir == "" {
		opts.OutputDir = filepath.Join("out", r.Name)
	}
	// The swap at the end deletes what the output held: refuse now, not
	// after an hour of building (and before touching the cache).
	if err := CheckOutputDir(opts.OutputDir); err != nil {
		return nil, err
	}
	b, store, err := newBuild(r, opts)
	if err != nil {
		return nil, err
	}
	defer b.log.Close()
	began := time.Now()
	defer func() { b.log.printSummary(time.Since(began)) }()
	// Every source gets its digest (recipe, lock or resolved) before any
	// key is made of it.
	if b.pinned, err = PinSources(ctx, r, b.opts.Locked, b.log.Infof); err != nil {
		return nil, err
	}
	if b.key, err = b.inputKey(); err != nil {
		return nil, err
	}
	if !b.opts.NoCache {
		m, ok, err := upToDate(b.opts.OutputDir, b.key, store, b.opts.Verify, true)
		if err != nil {
			return nil, err
		}
		if ok {
			b.log.Infof("nothing changed: %s is up to date (input key %.12s)", b.opts.OutputDir, b.key)
			return m, nil
		}
	}
	// An unreachable image source must fail now, not after the long steps.
	if err := PreflightOCI(ctx, r, b.opts.CacheDir); err != nil {
		return nil, err
	}
	// The work directory is locked, not named by PID: a build sweeping the
	// shared cache from another PID namespace must see it as live.
	tmp, err := store.NewTemp("work")
	if err != nil {
		return nil, err
	}
	defer tmp.Remove()
	b.work = tmp.Path
	b.run = plainRunner{work: tmp.Path}
	if !b.opts.NoCache {
		b.run = cachedRunner{store: store, scope: r.Name, log: b.log}
	}
	return b.do(ctx)
}

type build struct {
	r       *recipe.Recipe
	opts    Options
	epoch   int64
	outputs outputSet
	key     string // the build's input key (recorded with --no-cache too)
	store   *cache.Store
	work    string // this build's work directory in the cache
	run     Runner
	log     *Reporter
	// pinned lists the sources with their digests, for the manifest.
	pinned []osimage.Source
	// prev is what the output directory offers for reuse (reuse.go).
	prev *previousOutput
}

// flow is what the steps hand on to the steps after them. Each field is
// written by one node of the graph and read by nodes that depend on it.
type flow struct {
	bootDir string
	sources [][]binary // per go/oci step, in recipe order
	// layers are the root's layer step outputs so far, bottom first, and
	// lowerKey the input key of the top one (it chains the rest).
	layers   []rootLayer
	lowerKey string
	asmDir   string
	kernDir  string
	initBin  string
	art      *artifactInputs
	arts     map[string][]osimage.Artifact // per artifact writer
	keys     map[string]string             // per shipped file: its writer's key
	sizes    map[string]int64              // per step: its output's bytes
	mu       sync.Mutex
}

// node is one step of the build graph: a cached step (make builds it once
// its dependencies have run; use takes its output directory) or an
// artifact writer.
type node struct {
	name      string
	deps      []string
	jobs, mem int
	layer     string // for errors: the layer the step comes from
	make      func() (Step, error)
	use       func(dir string) error
	writer    *artifactWriter
}

// nodes declares the build graph. Steps read other steps' outputs only
// through f, after the graph has run those steps.
func (b *build) nodes(f *flow, stage string) []node {
	boot := &bootstrapStep{r: b.r, packages: b.packages(b.outputs), epoch: b.epoch, work: b.work, logf: b.log.Infof}
	if !b.opts.NoCache {
		// The work directory is in the cache directory: staged and fresh
		// .debs are renamed and linked within one file system.
		boot.debs = newDebPool(b.opts.CacheDir, b.r.Base.Mirror, b.r.Base.Release)
	}
	// The root in layers, each a cached step: the packages (bootstrap),
	// the go/oci binaries, then what the layers add (assemble). A change
	// above the base re-squashes only the layers above it; lowerKey is the
	// key of the layer below the next, which chains the ones under it.
	lowerKey := func(s Step) error {
		in, err := s.Inputs()
		if err != nil {
			return err
		}
		f.lowerKey = in.Key()
		return nil
	}
	ns := []node{{
		name: "bootstrap", jobs: 1, mem: 1024,
		make: func() (Step, error) { return boot, lowerKey(boot) },
		use: func(dir string) error {
			f.bootDir = dir
			f.layers = append(f.layers, rootLayer{dir, baseLayerInitrd})
			return nil
		},
	}}
	names := map[string]int{}
	unique := func(name string) string {
		names[name]++
		if n := names[name]; n > 1 {
			return fmt.Sprintf("%s#%d", name, n)
		}
		return name
	}
	var sourceNames []string
	for _, l := range b.r.Resolved {
		for _, g := range l.Go {
			s := &goBuildStep{g: g, arch: b.r.Base.Architecture}
			i := len(f.sources)
			f.sources = append(f.sources, nil)
			name := unique(s.Name())
			sourceNames = append(sourceNames, name)
			ns = append(ns, node{
				name: name, jobs: 1, mem: 2048, layer: l.Name,
				make: func() (Step, error) { return s, nil },
				use: func(dir string) error {
					in, err := s.Inputs()
					if err != nil {
						return err
					}
					f.sources[i] = []binary{{src: s.binaryPath(dir), dest: g.Binary, step: s.Name(), stepKey: in.Key()}}
					return nil
				},
			})
		}
		for _, o := range l.OCI {
			s := &ociStep{src: o, arch: b.r.Base.Architecture, storeDir: OCIStoreDir(b.opts.CacheDir)}
			i := len(f.sources)
			f.sources = append(f.sources, nil)
			name := unique(s.Name())
			sourceNames = append(sourceNames, name)
			ns = append(ns, node{
				name: name, jobs: 1, mem: 256, layer: l.Name,
				make: func() (Step, error) { return s, nil },
				use: func(dir string) (err error) {
					f.sources[i], err = s.binaries(dir)
					return err
				},
			})
		}
	}
	arch := b.r.Base.Architecture
	below := "bootstrap"
	if len(sourceNames) > 0 {
		ns = append(ns, node{
			name: "binaries", deps: append([]string{"bootstrap"}, sourceNames...), jobs: 1, mem: 1024,
			make: func() (Step, error) {
				var bins []binary
				for _, s := range f.sources {
					bins = append(bins, s...)
				}
				s := &binariesStep{base: f.layers[0].dir, baseKey: f.lowerKey, binaries: bins, epoch: b.epoch, work: b.work}
				return bytesMetered{Step: s}, lowerKey(s)
			},
			use: func(dir string) error { f.layers = append(f.layers, rootLayer{dir, binariesLayerInitrd}); return nil },
		})
		below = "binaries"
	}
	ns = append(ns, node{
		name: "init", jobs: 1, mem: 512,
		make: func() (Step, error) { return &initStep{arch: arch, src: b.opts.Init, log: b.log}, nil },
		use:  func(dir string) error { f.initBin = initBinary(dir); return nil },
	}, node{
		name: "assemble", deps: []string{below}, jobs: 2, mem: 1024,
		make: func() (Step, error) {
			return bytesMetered{Step: &assembleStep{r: b.r, lowers: layerDirs(f.layers), lowerKey: f.lowerKey, epoch: b.epoch, work: b.work}}, nil
		},
		use: func(dir string) error {
			f.asmDir, f.art.assembled = dir, dir
			f.art.layers = append(append([]rootLayer(nil), f.layers...), rootLayer{dir, topLayerInitrd})
			return nil
		},
	}, node{
		// The kernel and modules from the same layers as assemble: a
		// changed unit or file does not lift them again.
		name: "kernel", deps: []string{below}, jobs: 1, mem: 512,
		make: func() (Step, error) {
			return &kernelStep{lowers: layerDirs(f.layers), lowerKey: f.lowerKey, arch: arch, modules: b.modules(), work: b.work}, nil
		},
		use: func(dir string) error { f.kernDir, f.art.kernelDir = dir, dir; return nil },
	}, node{
		// The initrd without root: disk boots and root by URL; the live
		// initrd is the root's layers before it (the initrd writer).
		name: "initrd-noroot", deps: []string{"kernel", "assemble", "init"}, jobs: 1, mem: 1024,
		make: func() (Step, error) {
			s := &initrdStep{kernel: f.kernDir, assembled: f.asmDir, init: f.initBin, modules: b.modules(), epoch: b.epoch}
			return bytesMetered{Step: s, total: func() int64 {
				return dirSize(filepath.Join(f.kernDir, modulesDir)) + fileSize(f.initBin)
			}}, nil
		},
		use: func(dir string) error { f.art.noRootInitrd = filepath.Join(dir, initrdFile); return nil },
	})
	for _, w := range artifactWriters(b.outputs, f.art, stage) {
		ns = append(ns, node{name: w.name, deps: w.needs, jobs: 1, mem: 1024, writer: &w})
	}
	return ns
}

func (b *build) do(ctx context.Context) (*osimage.BuildManifest, error) {
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
	defer func() {
		os.RemoveAll(stage)
		unlock()
	}()
	art, err := b.signedArtifactInputs()
	if err != nil {
		return nil, err
	}
	f := &flow{art: art, arts: map[string][]osimage.Artifact{}, sizes: map[string]int64{}, keys: map[string]string{}}
	if !b.opts.NoCache {
		b.prev = readPreviousOutput(b.store, final)
	}
	ns := b.nodes(f, stage)
	g := graph.New()
	for _, n := range ns {
		if err := g.Add(graph.Node{Name: n.name, Deps: n.deps, Jobs: n.jobs, MemMiB: n.mem, Run: b.runNode(n, f, stage)}); err != nil {
			return nil, err
		}
	}
	err = g.Run(ctx, graph.Options{
		Jobs: b.opts.Jobs, MemMiB: b.opts.MemMiB,
		Start: b.log.beginStep,
		Finish: func(name string, err error) {
			f.mu.Lock()
			size := f.sizes[name]
			for _, a := range f.arts[name] {
				size += a.Size
			}
			f.mu.Unlock()
			b.log.endStep(name, err, size)
		},
	})
	if err != nil {
		return nil, err
	}
	var arts []osimage.Artifact
	for _, n := range ns {
		if n.writer != nil {
			arts = append(arts, f.arts[n.name]...)
		}
	}
	sortArtifacts(arts)
	if err := removeAside(stage); err != nil {
		return nil, err
	}
	return b.publish(arts, f, stage, final)
}

// runNode is how the graph runs one node: a cached step through the
// runner, an artifact writer into the staging directory.
func (b *build) runNode(n node, f *flow, stage string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ctx = withMeter(ctx, b.log, n.name)
		if w := n.writer; w != nil {
			arts, key, err := b.writeOrReuse(ctx, w, stage)
			if err != nil {
				return err
			}
			f.mu.Lock()
			f.arts[n.name] = arts
			for _, name := range w.ships {
				if key != "" {
					f.keys[name] = key
				}
			}
			f.mu.Unlock()
			return nil
		}
		s, err := n.make()
		if err != nil {
			return err
		}
		dir, err := b.run.Run(ctx, s)
		if err == nil {
			size := dirSize(dir)
			f.mu.Lock()
			f.sizes[n.name] = size
			f.mu.Unlock()
			err = n.use(dir)
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
func (b *build) writeOrReuse(ctx context.Context, w *artifactWriter, stage string) ([]osimage.Artifact, string, error) {
	var key string
	if !b.opts.NoCache && len(w.ships) > 0 {
		var err error
		if key, err = w.key(); err != nil {
			return nil, "", fmt.Errorf("%s: %w", w.name, err)
		}
		b.log.setKey(w.name, key)
		arts, err := b.prev.reuse(stage, key, w.ships)
		if err == nil {
			b.log.cached(w.name)
			b.log.Infof("%s: reused %s from the previous output (same inputs)", w.name, strings.Join(w.ships, ", "))
			return arts, key, nil
		}
		if !errors.Is(err, errNotReusable) {
			b.log.Infof("warning: %s: %v (writing it)", w.name, err)
		}
	}
	stop := watchBytes(ctx, w.size(), w.files...)
	arts, err := w.write(ctx)
	stop()
	return arts, key, err
}

// signedArtifactInputs is artifactInputs with the Secure Boot signer the
// options name, for the writers (and their keys).
func (b *build) signedArtifactInputs() (*artifactInputs, error) {
	a := b.artifactInputs()
	if b.opts.SignKey != "" || b.opts.SignCert != "" {
		var err error
		if a.signer, a.cert, err = uki.LoadSigner(b.opts.SignKey, b.opts.SignCert); err != nil {
			return nil, fmt.Errorf("secure boot key: %w", err)
		}
	}
	return a, nil
}

func (b *build) artifactInputs() *artifactInputs {
	return &artifactInputs{
		cmdline: b.cmdline(),
		epoch:   b.epoch,
		name:    b.r.Name,
		version: b.r.Version,
		arch:    b.r.Base.Architecture,
		dataMiB: int64(b.r.DataSizeMiB()),
	}
}

// availableMiB is MemAvailable from /proc/meminfo; 0 (no bound) if unknown.
func availableMiB() int {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err == nil {
				return kb >> 10
			}
		}
	}
	return 0
}

// packages is the full package set: the recipe's plus what its outputs need.
func (b *build) packages(out outputSet) []string {
	// The init formats the data partition for persisted paths with the
	// image's own mke2fs.
	pkgs := append(b.r.Packages(), "e2fsprogs")
	if out.needsStub() {
		pkgs = append(pkgs, "systemd-boot-efi")
	}
	sort.Strings(pkgs)
	return dedup(pkgs)
}

func (b *build) modules() []string {
	return dedup(append(defaultInitrdModules(), b.r.Kernel.Modules...))
}

// cmdline is the recipe's command line plus what the init must know.
func (b *build) cmdline() string {
	words := strings.Fields(b.r.Cmdline())
	if p := b.r.Persist(); len(p) > 0 {
		words = append(words, "osb.persist="+strings.Join(p, ","))
	}
	if b.r.PersistRequired {
		words = append(words, "osb.persist.required=1")
	}
	return strings.Join(words, " ")
}

// publish writes the manifest into the staging directory and swaps it
// into place in one rename.
func (b *build) publish(arts []osimage.Artifact, f *flow, stage, final string) (*osimage.BuildManifest, error) {
	m, err := b.manifest(arts, f)
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
		if err := writeSeal(b.store, final, data, m.Artifacts, f.keys); err != nil {
			b.log.Infof("warning: %v (the next build hashes the output to see that nothing changed)", err)
		}
	}
	b.log.Infof("wrote %s", b.opts.OutputDir)
	return m, nil
}

func (b *build) manifest(arts []osimage.Artifact, f *flow) (*osimage.BuildManifest, error) {
	art := f.art
	osr, err := parseOSRelease(filepath.Join(art.assembled, osReleaseFile))
	if err != nil {
		return nil, fmt.Errorf("os-release: %w", err)
	}
	pkgs, err := readPackages(filepath.Join(f.bootDir, packagesList))
	if err != nil {
		return nil, err
	}
	initMeta, err := initInfo(f.initBin)
	if err != nil {
		return nil, err
	}
	var bins []binary
	for _, s := range f.sources {
		bins = append(bins, s...)
	}
	progs, err := goPrograms(bins, f.initBin)
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
		Cmdline:         art.cmdline,
		OSRelease:       osr,
		Layers:          layers,
		ExcludedLayers:  b.r.Exclude,
		Packages:        pkgs,
		Sources:         b.pinned,
		Init:            initMeta,
		GoPrograms:      progs,
		OCISources:      ociSources(b.r),
		Artifacts:       arts,
		SecureBoot:      art.secureBoot(arts),
	}, nil
}

func readPackages(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
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

// swapInto atomically replaces final with stage: readers see the old
// complete output or the new complete output, never a mix.
func swapInto(stage, final string) error {
	err := unix.Renameat2(unix.AT_FDCWD, stage, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		return os.Rename(stage, final)
	}
	return err // on success stage now holds the old output, removed by the caller
}

// Staging directories are judged live by an flock on the directory itself,
// not by a PID in their name: the kernel drops the lock when the build dies
// (kill -9 included), and it means the same to a build in another PID
// namespace writing the same output from a container.

func stagingPattern(final string) string {
	return "." + filepath.Base(final) + ".staging-"
}

// newStaging makes a staging directory beside final and locks it; unlock
// releases the lock.
func newStaging(final string) (dir string, unlock func(), err error) {
	for range 10 {
		dir, err := os.MkdirTemp(filepath.Dir(final), stagingPattern(final))
		if err != nil {
			return "", nil, err
		}
		f, err := lockDir(dir)
		if err == nil {
			return dir, func() { f.Close() }, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.EWOULDBLOCK) {
			return "", nil, err
		}
		// Swept by another build between MkdirTemp and the lock: again.
	}
	return "", nil, errors.New("staging directory swept repeatedly")
}

// lockDir takes an exclusive flock on dir without waiting and checks that
// dir still names the locked directory (a sweeper may have removed it).
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	held, err1 := f.Stat()
	named, err2 := os.Lstat(dir)
	if err1 != nil || err2 != nil || !os.SameFile(held, named) {
		f.Close()
		return nil, fs.ErrNotExist
	}
	return f, nil
}

// removeStaleStaging deletes staging directories left by killed builds:
// those whose lock it can take.
func removeStaleStaging(final string) {
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(final), stagingPattern(final)+"*"))
	for _, m := range matches {
		f, err := lockDir(m)
		if err != nil {
			continue // live, or swept by another build
		}
		_ = os.RemoveAll(m)
		f.Close()
	}
}

func dedup(s []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, x := range s {
		if !seen[x] {
			seen[x] = true
			out = append(out, x)
		}
	}
	return out
}
