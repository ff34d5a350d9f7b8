package remotecache_test

import (
	"context"
	"fmt"
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
// signed (one unsigned, one signed by another key) are misses: their
// steps run, the runner counts them and says why once, not once per
// step; the entry the trusted key signed is pulled.
func TestUntrustedSaidOnce(t *testing.T) {
	reg := testutil.NewRegistry(t)
	ctx := context.Background()
	ref := reg + "/osb/cache"
	src, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	keyDir := func(cn string) remotecache.Access {
		d := filepath.Join(t.TempDir(), cn)
		if err := uki.GenerateKey(d, cn); err != nil {
			t.Fatal(err)
		}
		return remotecache.Access{SignKey: filepath.Join(d, uki.KeyFile), SignCert: filepath.Join(d, uki.CertFile), Trust: []string{filepath.Join(d, uki.CertFile)}}
	}
	release, dev := keyDir("release"), keyDir("dev")
	pushers := []remotecache.Access{{}, dev, release, {}} // step n is pushed by pushers[n]
	for i, a := range pushers {
		var opts []remote.Option
		if a.SignKey != "" {
			if opts, err = a.PushOptions(); err != nil {
				t.Fatal(err)
			}
		}
		repo, err := remote.Open(ref, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := (plainRunner{src}).Run(ctx, fakeStep{name: "step", n: i}); err != nil {
			t.Fatal(err)
		}
		in, _ := fakeStep{n: i}.Inputs()
		if _, _, err := repo.Push(ctx, src, in.Key(), "test"); err != nil {
			t.Fatal(err)
		}
	}
	opts, err := remotecache.Access{Trust: release.Trust}.PullOptions()
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
		logs = append(logs, fmt.Sprintf(f, a...))
		mu.Unlock()
	})
	for i := range pushers {
		if _, err := r.Run(ctx, fakeStep{name: "step", n: i}); err != nil {
			t.Fatal(err)
		}
	}
	st := r.Wait()
	if st.Pulled != 1 || st.Untrusted != 3 || st.Refused != 0 {
		t.Errorf("stats %+v, want 1 pulled and 3 untrusted", st)
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
