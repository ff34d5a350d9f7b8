package builder

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/remotecache"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/cache/remote"
)

// cachedRunner is the runner of a build with a cache: it returns a step's
// cached output when its inputs are unchanged and fills the cache
// otherwise (the runner without a cache is step.Plain).
type cachedRunner struct {
	store *cache.Store
	scope string // the recipe, so --explain compares like with like
	log   *progress.Reporter
}

func (r cachedRunner) Run(ctx context.Context, s step.Step) (string, error) {
	in, err := s.Inputs()
	if err != nil {
		return "", fmt.Errorf("inputs: %w", err)
	}
	key := in.Key()
	name := progress.StepName(ctx, s.Name())
	r.log.SetKey(name, key)
	if dir, ok := r.store.Lookup(key); ok {
		r.store.Touch(key)
		r.log.Cached(name)
		r.remember(s.Name(), in)
		return dir, nil
	}
	if prev, ok := r.store.Previous(r.scope, s.Name()); ok {
		r.log.Explain(s.Name(), "inputs changed: "+strings.Join(in.Diff(prev), ", "))
	} else {
		r.log.Explain(s.Name(), "not built before")
	}
	ran := false
	dir, err := r.store.Fill(ctx, s.Name(), in, func(dir string) error { ran = true; return s.Run(ctx, dir) })
	if err != nil {
		return "", err
	}
	if !ran { // a concurrent build filled it while this one waited
		r.log.Cached(name)
	}
	r.remember(s.Name(), in)
	return dir, nil
}

// remember records the inputs for --explain. The step's output is good
// either way, so a failure only costs the next build its explanation.
func (r cachedRunner) remember(step string, in cache.Inputs) {
	if err := r.store.Remember(r.scope, step, in); err != nil {
		r.log.Infof("warning: %v (the next build cannot say why %s misses the cache)", err, step)
	}
}

// bytesMetered reports the bytes its step has written so far as progress:
// for steps whose tools say nothing while they write (mksquashfs, the
// initrd writer).
type bytesMetered struct {
	step.Step
	total func() int64 // an estimate of the final size; nil: unknown
}

func (s bytesMetered) Run(ctx context.Context, out string) error {
	var total int64
	if s.total != nil {
		total = s.total()
	}
	stop := progress.WatchBytes(ctx, total, out)
	defer stop()
	return s.Step.Run(ctx, out)
}

// withRemote wraps the cached runner in the remote cache when the options
// name a repository (nil otherwise).
func (b *buildRun) withRemote(ctx context.Context, next step.Runner) (*remotecache.Runner, error) {
	if b.opts.CacheFrom == "" && b.opts.CacheTo == "" {
		return nil, nil
	}
	var from, to *remote.Repo
	if b.opts.CacheFrom != "" {
		opts, err := b.opts.CacheAccess.PullOptions()
		if err != nil {
			return nil, fmt.Errorf("--cache-from: %w", err)
		}
		if from, err = remote.Open(b.opts.CacheFrom, opts...); err != nil {
			return nil, fmt.Errorf("--cache-from: %w", err)
		}
		if b.opts.CacheAccess.TrustUnsigned {
			b.log.Infof("remote cache: --cache-trust-unsigned: entries of %s are taken without checking who signed them", b.opts.CacheFrom)
		}
	}
	if b.opts.CacheTo != "" {
		opts, err := b.opts.CacheAccess.PushOptions()
		if err != nil {
			return nil, fmt.Errorf("--cache-to: %w", err)
		}
		if to, err = remote.Open(b.opts.CacheTo, opts...); err != nil {
			return nil, fmt.Errorf("--cache-to: %w", err)
		}
	}
	return remotecache.NewRunner(ctx, next, b.store, from, to, b.r.Name, b.log.Infof), nil
}

// waitRemote waits for the pushes still running at the end of the build
// and says what the remote cache did.
func (b *buildRun) waitRemote(rr *remotecache.Runner) {
	began := time.Now()
	st := rr.Wait()
	if b.opts.CacheFrom != "" {
		b.log.Infof("remote cache: pulled %d entries (%s) from %s; %d refused, %d not signed by a trusted key", st.Pulled, progress.HumanSize(st.PulledBytes), b.opts.CacheFrom, st.Refused, st.Untrusted)
	}
	if b.opts.CacheTo != "" {
		b.log.Infof("remote cache: pushed %d entries (%s) to %s, waited %s at the end; %d failed", st.Pushed, progress.HumanSize(st.PushedBytes), b.opts.CacheTo, time.Since(began).Round(time.Millisecond), st.Failed)
	}
}
