package remotecache_test

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/remotecache"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/uki"
)

// TestUntrustedSaidOnce: entries in --cache-from that no trusted key
// signed (here: unsigned) are misses: the steps run, the runner counts
// them and says why once, not once per step.
func TestUntrustedSaidOnce(t *testing.T) {
	reg := testutil.NewRegistry(t)
	ctx := context.Background()
	ref := reg + "/osb/cache"
	src, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := remote.Open(ref)
	if err != nil {
		t.Fatal(err)
	}
	const steps = 3
	for i := range steps {
		if _, err := (plainRunner{src}).Run(ctx, fakeStep{name: "step", n: i}); err != nil {
			t.Fatal(err)
		}
		in, _ := fakeStep{n: i}.Inputs()
		if _, _, err := unsigned.Push(ctx, src, in.Key(), "test"); err != nil {
			t.Fatal(err)
		}
	}
	keys := filepath.Join(t.TempDir(), "keys")
	if err := uki.GenerateKey(keys, "release"); err != nil {
		t.Fatal(err)
	}
	opts, err := remotecache.Access{Trust: []string{filepath.Join(keys, uki.CertFile)}}.PullOptions()
	if err != nil {
		t.Fatal(err)
	}
	from, err := remote.Open(ref, opts...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	var mu sync.Mutex
	r := remotecache.NewRunner(ctx, plainRunner{s}, s, from, nil, "test", func(f string, a ...any) {
		mu.Lock()
		logs = append(logs, f)
		mu.Unlock()
	})
	for i := range steps {
		if _, err := r.Run(ctx, fakeStep{name: "step", n: i}); err != nil {
			t.Fatal(err)
		}
	}
	st := r.Wait()
	if st.Pulled != 0 || st.Untrusted != steps || st.Refused != 0 {
		t.Errorf("stats %+v, want %d untrusted and nothing pulled", st, steps)
	}
	said := 0
	for _, l := range logs {
		if strings.Contains(l, "not signed by a trusted key") {
			said++
		}
	}
	if said != 1 {
		t.Errorf("said %d times that entries are untrusted: %q", said, logs)
	}
	if _, err := (remotecache.Access{}).PullOptions(); err == nil {
		t.Errorf("a pull trusting nobody was accepted")
	}
	if _, err := (remotecache.Access{}).PushOptions(); err == nil {
		t.Errorf("a push without a key was accepted")
	}
}
