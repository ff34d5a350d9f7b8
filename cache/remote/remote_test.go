package remote_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// fill makes an entry in s with a file tree and returns its key.
func fill(t *testing.T, s *cache.Store, step string, files map[string]string) string {
	t.Helper()
	var in cache.Inputs
	in.Add("step", step)
	for p, c := range files {
		in.Add(p, c)
	}
	_, err := s.Fill(context.Background(), step, in, func(dir string) error {
		for p, c := range files {
			full := filepath.Join(dir, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(full, []byte(c), 0o640); err != nil {
				return err
			}
		}
		return os.Symlink("a", filepath.Join(dir, "link"))
	})
	if err != nil {
		t.Fatal(err)
	}
	return in.Key()
}

func openStore(t *testing.T) *cache.Store {
	t.Helper()
	s, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openRepo opens ref signing with a test key and trusting it.
func openRepo(t *testing.T, ref string) *remote.Repo {
	t.Helper()
	sign, trust := keyPair(t, "test")
	r, err := remote.Open(ref, sign, trust)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPushPull: an entry pushed from one store and pulled into another is
// the same tree (files, modes, mtimes, symlinks), sealed anew there; a
// second push of it uploads nothing; a missing key is ErrNotFound.
func TestPushPull(t *testing.T) {
	reg := testutil.NewRegistry(t)
	ctx := context.Background()
	a, b := openStore(t), openStore(t)
	key := fill(t, a, "step-a", map[string]string{"a": "alpha", "sub/b": "beta", "sub/deeper/c": "", "d": "alpha"})
	repo := openRepo(t, reg+"/osb/cache")
	n, pushed, err := repo.Push(ctx, a, key, "test")
	if err != nil || !pushed || n == 0 {
		t.Fatalf("push: %d bytes, pushed %v, %v", n, pushed, err)
	}
	if n, pushed, err := repo.Push(ctx, a, key, "test"); err != nil || pushed || n != 0 {
		t.Fatalf("second push: %d bytes, pushed %v, %v; want nothing", n, pushed, err)
	}
	dir, got, err := repo.Pull(ctx, b, key)
	if err != nil {
		t.Fatal(err)
	}
	if got != int64(len("alpha")*2+len("beta")) {
		t.Errorf("pulled %d bytes", got)
	}
	if err := b.Verify(key); err != nil {
		t.Errorf("pulled entry: %v", err)
	}
	_, ma, _ := a.Sealed(key)
	_, mb, _ := b.Sealed(key)
	if len(ma.Files) != len(mb.Files) {
		t.Fatalf("%d files pushed, %d pulled", len(ma.Files), len(mb.Files))
	}
	for i := range ma.Files {
		fa, fb := ma.Files[i], mb.Files[i]
		if fa.Path != fb.Path || fa.Mode != fb.Mode || fa.MTime != fb.MTime || fa.SHA256 != fb.SHA256 || fa.Link != fb.Link {
			t.Errorf("%s: pushed %+v, pulled %+v", fa.Path, fa, fb)
		}
	}
	if l, err := os.Readlink(filepath.Join(dir, "link")); err != nil || l != "a" {
		t.Errorf("link: %q, %v", l, err)
	}
	if _, _, err := repo.Pull(ctx, openStore(t), strings.Repeat("0", 64)); !errors.Is(err, remote.ErrNotFound) {
		t.Errorf("missing key: %v, want ErrNotFound", err)
	}
	info, err := repo.Stat(ctx, key)
	if err != nil || info.Step != "step-a" || info.Recipe != "test" || time.Since(info.Pushed) > time.Minute {
		t.Errorf("stat: %+v, %v", info, err)
	}
}

// TestConcurrentPush: builders pushing the same entry at once all
// succeed, and the repository ends with one entry.
func TestConcurrentPush(t *testing.T) {
	reg := testutil.NewRegistry(t)
	ctx := context.Background()
	stores := []*cache.Store{openStore(t), openStore(t), openStore(t)}
	var key string
	for _, s := range stores {
		key = fill(t, s, "same", map[string]string{"f": strings.Repeat("x", 1<<20)})
	}
	var wg sync.WaitGroup
	errs := make([]error, len(stores))
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = openRepo(t, reg+"/osb/cache").Push(ctx, s, key, "")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("push %d: %v", i, err)
		}
	}
	keys, err := openRepo(t, reg+"/osb/cache").Keys(ctx)
	if err != nil || len(keys) != 1 || keys[0] != key {
		t.Errorf("keys %v, %v; want [%s]", keys, err, key)
	}
}

// TestTamperedBlob: a blob whose bytes are not its digest is refused and
// the store gets no entry.
func TestTamperedBlob(t *testing.T) {
	testutil.RequireTool(t, testutil.RegistryBinary)
	reg, err := testutil.StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	ctx := context.Background()
	a := openStore(t)
	key := fill(t, a, "s", map[string]string{"f": "the right bytes"})
	repo := openRepo(t, reg.Host+"/osb/cache")
	if _, _, err := repo.Push(ctx, a, key, ""); err != nil {
		t.Fatal(err)
	}
	_, m, _ := a.Sealed(key)
	var sum string
	for _, f := range m.Files {
		if f.Path == "f" {
			sum = f.SHA256
		}
	}
	data := filepath.Join(reg.Storage(), "docker/registry/v2/blobs/sha256", sum[:2], sum, "data")
	if err := os.WriteFile(data, []byte("the wrong bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := openStore(t)
	_, _, err = repo.Pull(ctx, b, key)
	if err == nil || !strings.Contains(err.Error(), sum) {
		t.Fatalf("pull of a tampered blob: %v, want an error naming sha256:%s", err, sum)
	}
	if _, ok := b.Lookup(key); ok {
		t.Errorf("the tampered entry is in the store")
	}
}

// TestDeleteRefused: a registry without deletes enabled is named as such.
func TestDeleteRefused(t *testing.T) {
	testutil.RequireTool(t, testutil.RegistryBinary)
	t.Setenv("REGISTRY_STORAGE_DELETE_ENABLED", "false")
	reg, err := testutil.StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	ctx := context.Background()
	a := openStore(t)
	key := fill(t, a, "s", map[string]string{"f": "x"})
	repo := openRepo(t, reg.Host+"/osb/cache")
	if _, _, err := repo.Push(ctx, a, key, ""); err != nil {
		t.Fatal(err)
	}
	info, err := repo.Stat(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Delete(ctx, info); !errors.Is(err, remote.ErrDeleteRefused) {
		t.Errorf("delete: %v, want ErrDeleteRefused", err)
	}
}
