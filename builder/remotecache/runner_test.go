package remotecache_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/remotecache"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestRegistryGone: with the registry gone, the runner's lookups are
// misses and its pushes fail without failing anything; it says so once.
func TestRegistryGone(t *testing.T) {
	testutil.RequireTool(t, testutil.RegistryBinary)
	reg, err := testutil.StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	host := reg.Host
	reg.Stop()
	ctx := context.Background()
	repo, err := remote.Open(host+"/osb/cache", remote.TrustUnsigned())
	if err != nil {
		t.Fatal(err)
	}
	s, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := repo.Pull(ctx, s, strings.Repeat("0", 64)); err == nil || errors.Is(err, remote.ErrNotFound) {
		t.Fatalf("pull from a stopped registry: %v, want a connection error", err)
	}
	var logs []string
	var mu sync.Mutex
	r := remotecache.NewRunner(ctx, plainRunner{s}, s, repo, repo, "test", func(f string, a ...any) {
		mu.Lock()
		logs = append(logs, f)
		mu.Unlock()
	})
	for i := range 3 {
		if _, err := r.Run(ctx, fakeStep{name: "step", n: i}); err != nil {
			t.Fatalf("run with the registry gone: %v", err)
		}
	}
	st := r.Wait()
	if st.Pulled != 0 || st.Pushed != 0 {
		t.Errorf("stats %+v", st)
	}
	down := 0
	for _, l := range logs {
		if strings.Contains(l, "does not answer") {
			down++
		}
	}
	if down != 1 {
		t.Errorf("said %d times that the registry is gone: %q", down, logs)
	}
}

// plainRunner fills the store with a step's output, as the builder's
// cached runner does.
type plainRunner struct{ s *cache.Store }

func (r plainRunner) Run(ctx context.Context, st step.Step) (string, error) {
	in, err := st.Inputs()
	if err != nil {
		return "", err
	}
	if dir, ok := r.s.Lookup(in.Key()); ok {
		return dir, nil
	}
	return r.s.Fill(ctx, st.Name(), in, func(dir string) error { return st.Run(ctx, dir) })
}

type fakeStep struct {
	name string
	n    int
}

func (f fakeStep) Name() string { return f.name }
func (f fakeStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("n", fmt.Sprint(f.n))
	return in, nil
}

func (f fakeStep) Run(_ context.Context, out string) error {
	return os.WriteFile(filepath.Join(out, "out"), []byte(fmt.Sprint(f.n)), 0o644)
}
