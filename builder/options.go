package builder

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/hostarch"
	"github.com/ironcore-dev/os-builder/builder/programs"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/remotecache"
	"github.com/ironcore-dev/os-builder/builder/rootfs"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/initrd/cmdline"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// DefaultSourceDateEpoch is used when SOURCE_DATE_EPOCH is unset, so that
// builds are reproducible by default (2025-01-01T00:00:00Z).
const DefaultSourceDateEpoch = 1735689600

// Options control one build.
type Options struct {
	// OutputDir receives the artifacts; default out/<recipe name>.
	OutputDir string
	// CacheDir holds step outputs; default cache.DefaultDir().
	CacheDir string
	// NoCache runs every step, neither reading nor filling the cache.
	NoCache bool
	// CacheFrom and CacheTo name a registry repository of cache entries
	// (package cache/remote): steps missing locally are pulled from
	// CacheFrom, entries are pushed to CacheTo. Empty: none.
	CacheFrom, CacheTo string
	// CacheAccess is how both are spoken to: --insecure, the key pushed
	// entries are signed with, the certificates pulled ones must be
	// signed by.
	CacheAccess remotecache.Access
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
	// Locked builds only sources the recipe's lock pins (see
	// sources.PinSources).
	Locked bool
	// reporter is the progress report several architectures' builds
	// share (buildLanes); nil: prepare makes one from Progress.
	reporter *progress.Reporter
	// Init supplies the initrd's init; nil builds it from source
	// (programs.SourceInit). cmd/builder passes the init it carries.
	Init programs.InitSource
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

// buildRun is one run of Build or PlanBuild: the recipe, the options and
// what prepare worked out from them.
type buildRun struct {
	r     *recipe.Recipe
	opts  Options
	epoch int64
	art   artifacts.Config // what the writers apply
	exe   string           // the builder executable's digest
	key   string           // the build's input key (recorded with --no-cache too)
	store *cache.Store
	work  string // this build's work directory in the cache
	run   step.Runner
	log   *progress.Reporter
	// prefix names this run's nodes in a graph of several architectures
	// ("arm64/"); "" when the build is of one.
	prefix string
	// pinned lists the sources with their digests, for the manifest.
	pinned []osimage.Source
}

// results are what the nodes report as they finish, for progress and the
// manifest (the values they hand on are in the table's values).
type results struct {
	mu    sync.Mutex
	arts  map[string][]osimage.Artifact // per artifact writer
	keys  map[string]string             // per shipped file: its writer's key
	sizes map[string]int64              // per node: its output's bytes
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

// cmdline is the recipe's command line plus what the init must know.
func (b *buildRun) cmdline() string {
	words := strings.Fields(b.r.Cmdline())
	osb := cmdline.Cmdline{PersistRequired: b.r.PersistRequired}
	if p := b.r.Persist(); len(p) > 0 {
		osb.Persist = p
	}
	if w := osb.String(); w != "" {
		words = append(words, w)
	}
	return strings.Join(words, " ")
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

// nativeDpkg is, for a recipe of another architecture than the host's, the
// bootstrap's native dpkg-deb for this host (cmd/nativedpkg, from the same
// source as the init); nil on a native build.
func (b *buildRun) nativeDpkg() rootfs.NativeDpkg {
	host := hostarch.Native()
	if b.r.Base.Architecture == host {
		return nil
	}
	src := b.opts.Init
	if src == nil {
		src = programs.SourceInit{}
	}
	return func(ctx context.Context, path string) error {
		_, err := src.WriteProgram(ctx, programs.NativeDpkgProgram, path, host)
		return err
	}
}
