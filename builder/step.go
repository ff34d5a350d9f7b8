package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/cache"
)

// Step is one unit of build work. Its output is a directory whose contents
// depend only on Inputs, which is what makes it cacheable.
type Step interface {
	// Name identifies the step in progress lines and --explain output.
	Name() string
	// Inputs are everything the output depends on.
	Inputs() (cache.Inputs, error)
	// Run writes the step's output into out, an empty directory.
	Run(ctx context.Context, out string) error
}

// Runner runs a step and returns the directory holding its output. Caching
// is a decorator around the plain runner, in the manner of ko's
// build.Interface; the build graph (build.go) reports start and end.
type Runner interface {
	Run(ctx context.Context, s Step) (string, error)
}

// plainRunner runs every step into a fresh directory under work.
type plainRunner struct{ work string }

func (r plainRunner) Run(ctx context.Context, s Step) (string, error) {
	out, err := os.MkdirTemp(r.work, sanitizeName(s.Name())+"-")
	if err != nil {
		return "", err
	}
	if err := s.Run(ctx, out); err != nil {
		return "", err
	}
	return out, nil
}

// cachedRunner returns a step's cached output when its inputs are unchanged
// and fills the cache otherwise.
type cachedRunner struct {
	store *cache.Store
	scope string // the recipe, so --explain compares like with like
	log   *Reporter
}

func (r cachedRunner) Run(ctx context.Context, s Step) (string, error) {
	in, err := s.Inputs()
	if err != nil {
		return "", fmt.Errorf("inputs: %w", err)
	}
	key := in.Key()
	name := stepName(ctx, s.Name())
	r.log.setKey(name, key)
	if dir, ok := r.store.Lookup(key); ok {
		r.store.Touch(key)
		r.log.cached(name)
		r.remember(s.Name(), in)
		return dir, nil
	}
	if prev, ok := r.store.Previous(r.scope, s.Name()); ok {
		r.log.explain(s.Name(), "inputs changed: "+strings.Join(in.Diff(prev), ", "))
	} else {
		r.log.explain(s.Name(), "not built before")
	}
	ran := false
	dir, err := r.store.Fill(ctx, s.Name(), in, func(dir string) error { ran = true; return s.Run(ctx, dir) })
	if err != nil {
		return "", err
	}
	if !ran { // a concurrent build filled it while this one waited
		r.log.cached(name)
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
	Step
	total func() int64 // an estimate of the final size; nil: unknown
}

func (s bytesMetered) Run(ctx context.Context, out string) error {
	var total int64
	if s.total != nil {
		total = s.total()
	}
	stop := watchBytes(ctx, total, out)
	defer stop()
	return s.Step.Run(ctx, out)
}

func sanitizeName(s string) string {
	return strings.NewReplacer("/", "_", " ", "_", ":", "_").Replace(filepath.Clean(s))
}
