// Package remotecache is the remote cache as a decorator of the build's
// step runner: it pulls a step's entry from a registry repository before
// the step runs and pushes the entries the build has after. The entries'
// storage in the registry (their layout, Repo) is package cache/remote.
package remotecache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/cache/remote"
)

// Runner is the remote cache as a decorator of a build's step runner (as
// ko's build.Caching wraps its builder): before Next runs a step whose
// entry is not in the local store it asks From for the entry, and after a
// step's entry is in the local store (built, found or pulled) it pushes it
// to To in the background, unless To has it. A registry that fails (gone,
// refusing) turns into misses: the build goes on with its local cache.
type Runner struct {
	next   step.Runner
	store  *cache.Store
	from   *remote.Repo
	to     *remote.Repo
	recipe string
	logf   func(format string, args ...any)
	ctx    context.Context

	wg      sync.WaitGroup
	slots   chan struct{} // pushes at once
	mu      sync.Mutex
	stats   Stats
	down    bool
	pushing map[string]bool
}

// Stats is what the remote cache did for one build.
type Stats struct {
	Pulled      int   `json:"pulled"`
	PulledBytes int64 `json:"pulledBytes"`
	Pushed      int   `json:"pushed"`
	PushedBytes int64 `json:"pushedBytes"`
	// Refused counts entries that were there but unusable (a blob not
	// matching its digest, not our layout): their steps ran.
	Refused int `json:"refused"`
	// Untrusted counts entries not signed by a trusted key: misses.
	Untrusted int `json:"untrusted"`
	// Failed counts pushes that did not complete.
	Failed int `json:"failed"`
}

// pushesAtOnce bounds concurrent pushes: they share the build's uplink
// and its two cores with the steps.
const pushesAtOnce = 2

// NewRunner decorates next. from and to may be nil (no lookups, no
// pushes); recipe is recorded on pushed entries; ctx bounds the
// background pushes (the build's context).
func NewRunner(ctx context.Context, next step.Runner, store *cache.Store, from, to *remote.Repo, recipe string, logf func(string, ...any)) *Runner {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Runner{next: next, store: store, from: from, to: to, recipe: recipe, logf: logf, ctx: ctx,
		slots: make(chan struct{}, pushesAtOnce), pushing: map[string]bool{}}
}

// Run implements step.Runner.
func (r *Runner) Run(ctx context.Context, s step.Step) (string, error) {
	in, err := s.Inputs()
	if err != nil {
		return "", fmt.Errorf("inputs: %w", err)
	}
	key := in.Key()
	if r.from != nil && !r.isDown() {
		if _, ok := r.store.Lookup(key); !ok {
			r.pull(ctx, s.Name(), key)
		}
	}
	dir, err := r.next.Run(ctx, s)
	if err == nil && r.to != nil {
		r.push(s.Name(), key)
	}
	return dir, err
}

func (r *Runner) pull(ctx context.Context, name, key string) {
	began := time.Now()
	_, n, err := r.from.Pull(ctx, r.store, key)
	switch {
	case err == nil:
		r.mu.Lock()
		r.stats.Pulled++
		r.stats.PulledBytes += n
		if r.to != nil && r.to.String() == r.from.String() {
			r.pushing[key] = true // it is there
		}
		r.mu.Unlock()
		r.logf("remote cache: %s: pulled %.12s from %s (%d bytes in %s)", name, key, r.from, n, time.Since(began).Round(time.Millisecond))
	case errors.Is(err, remote.ErrNotFound):
	case errors.Is(err, remote.ErrUntrusted):
		r.mu.Lock()
		r.stats.Untrusted++
		first := r.stats.Untrusted == 1
		r.mu.Unlock()
		if first {
			r.logf("remote cache: %s: %v; entries not signed by a trusted key (--cache-trust) are misses, said here once", name, err)
		}
	case ctx.Err() != nil:
	case unreachable(err):
		r.goDown(fmt.Sprintf("%s: %v", name, err))
	default:
		r.mu.Lock()
		r.stats.Refused++
		r.mu.Unlock()
		r.logf("remote cache: %s: refused the entry, running the step: %v", name, err)
	}
}

func (r *Runner) push(name, key string) {
	r.mu.Lock()
	if r.down || r.pushing[key] {
		r.mu.Unlock()
		return
	}
	r.pushing[key] = true
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		select {
		case r.slots <- struct{}{}:
		case <-r.ctx.Done():
			return
		}
		defer func() { <-r.slots }()
		if r.isDown() {
			return
		}
		n, pushed, err := r.to.Push(r.ctx, r.store, key, r.recipe)
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case err != nil:
			r.stats.Failed++
			if unreachable(err) {
				r.downLocked(fmt.Sprintf("pushing %s: %v", name, err))
			} else {
				r.logf("remote cache: %s: push failed: %v", name, err)
			}
		case pushed:
			r.stats.Pushed++
			r.stats.PushedBytes += n
		}
	}()
}

// Wait waits for the pushes still running and returns what the remote
// cache did.
func (r *Runner) Wait() Stats {
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

func (r *Runner) isDown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.down
}

func (r *Runner) goDown(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.downLocked(why)
}

func (r *Runner) downLocked(why string) {
	if r.down {
		return
	}
	r.down = true
	r.logf("remote cache: the registry does not answer (or refuses our credentials), building with the local cache only from here on: %s", why)
}

// unreachable reports an error of the connection or the credentials
// rather than of an entry: the registry is gone or refuses us, so asking
// it again for every step only waits.
func unreachable(err error) bool {
	var ne net.Error
	var oe *net.OpError
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) {
		return true
	}
	return errors.As(err, &oe) || errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}
