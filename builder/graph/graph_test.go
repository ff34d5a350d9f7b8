package graph

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIndependentNodesOverlap: two nodes that each wait for the other to
// have started can only finish if the scheduler runs them at once.
func TestIndependentNodesOverlap(t *testing.T) {
	a, b := make(chan struct{}), make(chan struct{})
	meet := func(mine, other chan struct{}) func(context.Context) error {
		return func(ctx context.Context) error {
			close(mine)
			select {
			case <-other:
				return nil
			case <-time.After(10 * time.Second):
				return errors.New("the other node never started")
			}
		}
	}
	g := New()
	must(t, g.Add(Node{Name: "bootstrap", Run: meet(a, b)}))
	must(t, g.Add(Node{Name: "go:x", Run: meet(b, a)}))
	var after atomic.Bool
	must(t, g.Add(Node{Name: "assemble", Deps: []string{"bootstrap", "go:x"}, Run: func(context.Context) error {
		after.Store(true)
		return nil
	}}))
	if err := g.Run(context.Background(), Options{Jobs: 2}); err != nil {
		t.Fatal(err)
	}
	if !after.Load() {
		t.Error("the dependent node did not run")
	}
}

// TestDependenciesFinishFirst: a node starts only after each of its
// dependencies has returned.
func TestDependenciesFinishFirst(t *testing.T) {
	var mu sync.Mutex
	var log []string
	note := func(s string) func(context.Context) error {
		return func(context.Context) error {
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			log = append(log, s)
			mu.Unlock()
			return nil
		}
	}
	g := New()
	must(t, g.Add(Node{Name: "iso", Deps: []string{"uki"}, Run: note("iso")}))
	must(t, g.Add(Node{Name: "uki", Deps: []string{"initrd"}, Run: note("uki")}))
	must(t, g.Add(Node{Name: "initrd", Run: note("initrd")}))
	if err := g.Run(context.Background(), Options{Jobs: 4}); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(log, " "); got != "initrd uki iso" {
		t.Errorf("ran %q, want dependencies first", got)
	}
}

// TestBudgetBoundsConcurrency: never more job slots or memory in use than
// the budget, and a node bigger than the budget still runs (alone).
func TestBudgetBoundsConcurrency(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       Options
		jobs, mem  int
		nodes      int
		wantMaxRun int32
	}{
		{name: "jobs", opts: Options{Jobs: 2}, jobs: 1, nodes: 6, wantMaxRun: 2},
		{name: "weighted", opts: Options{Jobs: 4}, jobs: 2, nodes: 6, wantMaxRun: 2},
		{name: "memory", opts: Options{Jobs: 8, MemMiB: 3000}, jobs: 1, mem: 1000, nodes: 6, wantMaxRun: 3},
		{name: "too big", opts: Options{Jobs: 1, MemMiB: 100}, jobs: 5, mem: 1000, nodes: 3, wantMaxRun: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var now, peak atomic.Int32
			g := New()
			for i := range tc.nodes {
				must(t, g.Add(Node{Name: string(rune('a' + i)), Jobs: tc.jobs, MemMiB: tc.mem, Run: func(context.Context) error {
					n := now.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					time.Sleep(20 * time.Millisecond)
					now.Add(-1)
					return nil
				}}))
			}
			if err := g.Run(context.Background(), tc.opts); err != nil {
				t.Fatal(err)
			}
			if peak.Load() != tc.wantMaxRun {
				t.Errorf("at most %d nodes ran at once, want %d", peak.Load(), tc.wantMaxRun)
			}
		})
	}
}

// TestFailureCancelsSiblings: when one node fails, a sibling still running
// sees its context cancelled, dependents never start, and Run returns the
// failure (not the sibling's cancellation).
func TestFailureCancelsSiblings(t *testing.T) {
	boom := errors.New("mmdebstrap: exit status 1")
	started := make(chan struct{})
	var siblingErr error
	var dependentRan atomic.Bool
	var finished []string
	var mu sync.Mutex
	g := New()
	must(t, g.Add(Node{Name: "go:slow", Run: func(ctx context.Context) error {
		close(started)
		select {
		case <-ctx.Done():
			siblingErr = ctx.Err()
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return nil
		}
	}}))
	must(t, g.Add(Node{Name: "bootstrap", Run: func(ctx context.Context) error {
		<-started
		return boom
	}}))
	must(t, g.Add(Node{Name: "assemble", Deps: []string{"bootstrap", "go:slow"}, Run: func(context.Context) error {
		dependentRan.Store(true)
		return nil
	}}))
	start := time.Now()
	err := g.Run(context.Background(), Options{Jobs: 2, Finish: func(name string, err error) {
		mu.Lock()
		finished = append(finished, name)
		mu.Unlock()
	}})
	var ne *NodeError
	if !errors.As(err, &ne) || ne.Node != "bootstrap" || !errors.Is(err, boom) {
		t.Fatalf("Run returned %v, want bootstrap's failure", err)
	}
	if !errors.Is(siblingErr, context.Canceled) {
		t.Errorf("the running sibling saw %v, want its context cancelled", siblingErr)
	}
	if dependentRan.Load() {
		t.Error("a dependent of the failed node ran")
	}
	if time.Since(start) > 5*time.Second {
		t.Error("Run waited for the sibling instead of cancelling it")
	}
	if len(finished) != 2 {
		t.Errorf("finished %v, want both started nodes reported", finished)
	}
}

// TestCallerCancels: the caller's cancellation is returned as such.
func TestCallerCancels(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	g := New()
	must(t, g.Add(Node{Name: "a", Run: func(ctx context.Context) error { cancel(); <-ctx.Done(); return ctx.Err() }}))
	must(t, g.Add(Node{Name: "b", Deps: []string{"a"}, Run: func(context.Context) error { t.Error("b ran"); return nil }}))
	if err := g.Run(ctx, Options{Jobs: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}

func TestOrderErrors(t *testing.T) {
	nop := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name  string
		nodes []Node
		want  string
	}{
		{"unknown", []Node{{Name: "a", Deps: []string{"x"}, Run: nop}}, `a depends on unknown step "x"`},
		{"cycle", []Node{{Name: "a", Deps: []string{"b"}, Run: nop}, {Name: "b", Deps: []string{"a"}, Run: nop}, {Name: "c", Run: nop}}, "dependency cycle among a, b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New()
			for _, n := range tc.nodes {
				must(t, g.Add(n))
			}
			if _, err := g.Order(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Order: %v, want %q", err, tc.want)
			}
			if err := g.Run(context.Background(), Options{}); err == nil {
				t.Error("Run of a broken graph succeeded")
			}
		})
	}
	g := New()
	must(t, g.Add(Node{Name: "a", Run: nop}))
	if err := g.Add(Node{Name: "a", Run: nop}); err == nil {
		t.Error("a second node named a was accepted")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
