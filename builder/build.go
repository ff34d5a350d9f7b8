// Package builder turns a resolved recipe into boot artifacts. A build is a
// chain of cacheable steps (bootstrap, go/oci sources, assemble, initrd,
// artifacts); the output directory is staged aside and swapped into place
// only when every artifact and the manifest are complete.
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
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

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
	// SignKey and SignCert (PEM paths) sign the UKIs for Secure Boot.
	SignKey, SignCert string
	// SourceDateEpoch fixes every timestamp; 0 means $SOURCE_DATE_EPOCH or
	// DefaultSourceDateEpoch.
	SourceDateEpoch int64
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

// Build runs the recipe and returns the manifest of the output directory.
func Build(ctx context.Context, r *recipe.Recipe, opts Options) (*osimage.BuildManifest, error) {
	epoch, err := opts.epoch()
	if err != nil {
		return nil, err
	}
	if opts.OutputDir == "" {
		opts.OutputDir = filepath.Join("out", r.Name)
	}
	// The swap at the end deletes what the output held: refuse now, not
	// after an hour of building.
	if err := CheckOutputDir(opts.OutputDir); err != nil {
		return nil, err
	}
	if opts.CacheDir == "" {
		opts.CacheDir = DefaultCacheDir()
	}
	store, err := cache.Open(opts.CacheDir)
	if err != nil {
		return nil, err
	}
	// The work directory is locked, not named by PID: a build sweeping the
	// shared cache from another PID namespace must see it as live.
	tmp, err := store.NewTemp("work")
	if err != nil {
		return nil, err
	}
	defer tmp.Remove()
	work := tmp.Path

	log := NewReporter(opts.Progress, opts.Verbose)
	store.Log = log.Infof
	var runner Runner = plainRunner{work: work}
	if !opts.NoCache {
		runner = cachedRunner{store: store, scope: r.Name, log: log}
	}
	runner = timedRunner{next: runner, log: log}
	b := &build{r: r, opts: opts, epoch: epoch, run: runner, work: work, log: log}
	return b.do(ctx)
}

type build struct {
	r     *recipe.Recipe
	opts  Options
	epoch int64
	run   Runner
	work  string
	log   *Reporter
}

func (b *build) do(ctx context.Context) (*osimage.BuildManifest, error) {
	outputs, err := parseOutputs(b.r.Outputs)
	if err != nil {
		return nil, err
	}
	// An unreachable image source must fail now, not after the long steps.
	if err := PreflightOCI(ctx, b.r, b.opts.CacheDir); err != nil {
		return nil, err
	}
	boot := &bootstrapStep{r: b.r, packages: b.packages(outputs), epoch: b.epoch, work: b.work, logf: b.log.Infof}
	if !b.opts.NoCache {
		// The work directory is in the cache directory: staged and fresh
		// .debs are renamed and linked within one file system.
		boot.debs = newDebPool(b.opts.CacheDir, b.r.Base.Mirror, b.r.Base.Release)
	}
	bootIn, err := boot.Inputs()
	if err != nil {
		return nil, err
	}
	bootDir, err := b.run.Run(ctx, boot)
	if err != nil {
		return nil, err
	}
	binaries, err := b.sources(ctx)
	if err != nil {
		return nil, err
	}
	asmDir, err := b.run.Run(ctx, &assembleStep{r: b.r, bootstrap: bootDir, bootstrapKey: bootIn.Key(), binaries: binaries, modules: b.modules(), epoch: b.epoch, work: b.work})
	if err != nil {
		return nil, err
	}
	initBin, err := buildInit(ctx, b.work, b.r.Base.Architecture)
	if err != nil {
		return nil, err
	}
	initrdDir, err := b.run.Run(ctx, &initrdStep{assembled: asmDir, init: initBin, modules: b.modules(), epoch: b.epoch, withRoot: true})
	if err != nil {
		return nil, err
	}
	art := &artifactInputs{
		assembled: asmDir,
		initrd:    filepath.Join(initrdDir, initrdFile),
		cmdline:   b.cmdline(),
		epoch:     b.epoch,
		name:      b.r.Name,
		version:   b.r.Version,
		arch:      b.r.Base.Architecture,
		dataMiB:   int64(b.r.DataSizeMiB()),
	}
	if outputs["disk"] || outputs["pxe"] {
		dir, err := b.run.Run(ctx, &initrdStep{assembled: asmDir, init: initBin, modules: b.modules(), epoch: b.epoch})
		if err != nil {
			return nil, err
		}
		art.noRootInitrd = filepath.Join(dir, initrdFile)
	}
	if b.opts.SignKey != "" || b.opts.SignCert != "" {
		if art.signer, art.cert, err = uki.LoadSigner(b.opts.SignKey, b.opts.SignCert); err != nil {
			return nil, fmt.Errorf("secure boot key: %w", err)
		}
	}
	return b.publish(ctx, outputs, art, bootDir)
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

// sources runs the recipe's go and oci steps and returns what they made.
func (b *build) sources(ctx context.Context) ([]binary, error) {
	var out []binary
	for _, l := range b.r.Resolved {
		for _, g := range l.Go {
			s := &goBuildStep{g: g, arch: b.r.Base.Architecture}
			dir, err := b.run.Run(ctx, s)
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", l.Name, err)
			}
			out = append(out, binary{src: s.binaryPath(dir), dest: g.Binary, step: s.Name()})
		}
		for _, o := range l.OCI {
			s := &ociStep{src: o, arch: b.r.Base.Architecture, storeDir: OCIStoreDir(b.opts.CacheDir)}
			dir, err := b.run.Run(ctx, s)
			if err != nil {
				return nil, fmt.Errorf("layer %s: %w", l.Name, err)
			}
			bins, err := s.binaries(dir)
			if err != nil {
				return nil, err
			}
			out = append(out, bins...)
		}
	}
	return out, nil
}

// publish writes every chosen artifact and the manifest into a staging
// directory beside the output and swaps it into place in one rename.
func (b *build) publish(ctx context.Context, outputs outputSet, art *artifactInputs, bootDir string) (*osimage.BuildManifest, error) {
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

	start := time.Now()
	done := b.log.start("artifacts")
	arts, err := writeArtifacts(ctx, outputs, art, stage)
	done(time.Since(start), err)
	if err != nil {
		return nil, err
	}
	m, err := b.manifest(arts, art, bootDir, stage)
	if err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(stage, osimage.ManifestFile), append(data, '\n'), 0o644); err != nil {
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
	b.log.Infof("wrote %s", b.opts.OutputDir)
	return m, nil
}

func (b *build) manifest(arts []osimage.Artifact, art *artifactInputs, bootDir, stage string) (*osimage.BuildManifest, error) {
	osr, err := parseOSRelease(filepath.Join(art.assembled, osReleaseFile))
	if err != nil {
		return nil, fmt.Errorf("os-release: %w", err)
	}
	pkgs, err := readPackages(filepath.Join(bootDir, packagesList))
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
		Artifacts:       arts,
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
