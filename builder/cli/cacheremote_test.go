package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/uki"
)

// TestCachePushPull: `cache push` moves a local cache to a registry
// repository and `cache pull` into another, empty cache, where the entry
// is sealed anew and verifies; a second push pushes nothing; --recipe
// pushes only the entries that recipe's last build used.
func TestCachePushPull(t *testing.T) {
	reg := testutil.NewRegistry(t)
	dirA, a, key := filledCache(t)
	transfer := func(args ...string) transferResult {
		t.Helper()
		code, stdout, stderr := runBuilder(t, append(args, "--json")...)
		if code != exitcode.OK {
			t.Fatalf("builder %s: exit %d\n%s", strings.Join(args, " "), code, stderr)
		}
		var res transferResult
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("builder %s: %v\n%s", strings.Join(args, " "), err, stdout)
		}
		return res
	}
	keys, other := filepath.Join(t.TempDir(), "keys"), filepath.Join(t.TempDir(), "other")
	for _, d := range []string{keys, other} {
		if code, _, stderr := runBuilder(t, "genkey", d); code != exitcode.OK {
			t.Fatalf("genkey: %s", stderr)
		}
	}
	sign := []string{"--cache-sign-key", filepath.Join(keys, uki.KeyFile), "--cache-sign-cert", filepath.Join(keys, uki.CertFile)}
	trust := []string{"--cache-trust", filepath.Join(keys, uki.CertFile)}
	repo := reg + "/osb/cache"
	if code, _, stderr := runBuilder(t, "cache", "push", repo, "--cache-dir", dirA); code != exitcode.Usage || !strings.Contains(stderr, "--cache-sign-key") {
		t.Errorf("push without a key: exit %d, %s", code, stderr)
	}
	if res := transfer(append([]string{"cache", "push", repo, "--cache-dir", dirA}, sign...)...); res.Entries != 1 || res.Bytes == 0 {
		t.Errorf("push: %+v, want 1 entry", res)
	}
	if res := transfer(append([]string{"cache", "push", repo, "--cache-dir", dirA}, sign...)...); res.Entries != 0 || res.Skipped != 1 {
		t.Errorf("second push: %+v, want 1 skipped", res)
	}
	dirB := t.TempDir()
	if code, _, stderr := runBuilder(t, "cache", "pull", repo, "--cache-dir", dirB); code != exitcode.Usage || !strings.Contains(stderr, "--cache-trust") {
		t.Errorf("pull trusting nobody: exit %d, %s", code, stderr)
	}
	if res := transfer("cache", "pull", repo, "--cache-dir", dirB, "--cache-trust", filepath.Join(other, uki.CertFile)); res.Entries != 0 || res.Untrusted != 1 {
		t.Errorf("pull trusting another key: %+v, want 1 untrusted", res)
	}
	if res := transfer("cache", "pull", repo, "--cache-dir", t.TempDir(), "--cache-trust-unsigned"); res.Entries != 1 {
		t.Errorf("pull --cache-trust-unsigned: %+v, want 1 entry", res)
	}
	if res := transfer(append([]string{"cache", "pull", repo, "--cache-dir", dirB}, trust...)...); res.Entries != 1 {
		t.Errorf("pull: %+v, want 1 entry", res)
	}
	b, err := cache.Open(dirB)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Verify(key); err != nil {
		t.Errorf("pulled entry: %v", err)
	}

	// --recipe: only what the recipe's last build used.
	var in cache.Inputs
	in.Add("x", "1")
	if err := a.Remember("r", "step", in); err != nil {
		t.Fatal(err)
	}
	otherRepo := reg + "/osb/other"
	if res := transfer(append([]string{"cache", "push", otherRepo, "--recipe", "r", "--cache-dir", dirA}, sign...)...); res.Entries != 1 {
		t.Errorf("push --recipe r: %+v, want its 1 entry", res)
	}
	if code, _, stderr := runBuilder(t, append([]string{"cache", "push", otherRepo, "--recipe", "nobody", "--cache-dir", dirA}, sign...)...); code == exitcode.OK || !strings.Contains(stderr, `no build of recipe "nobody"`) {
		t.Errorf("push --recipe of a recipe never built: exit %d, %s", code, stderr)
	}
	// --recipe is a recipe file, as on push and index; the name it was
	// here still works, with a note.
	file := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(file, []byte("name: r\nversion: \"1\"\nbase: {distribution: debian}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ recipe, note string }{{file, ""}, {"r", "--recipe r: no such file, taken as a recipe name (deprecated"}} {
		code, stdout, stderr := runBuilder(t, append([]string{"cache", "push", otherRepo, "--recipe", tc.recipe, "--cache-dir", dirA, "--json"}, sign...)...)
		var res transferResult
		if code != exitcode.OK || json.Unmarshal([]byte(stdout), &res) != nil || res.Skipped != 1 {
			t.Errorf("push --recipe %s: exit %d, %s, %s; want r's entry, there already", tc.recipe, code, stdout, stderr)
		}
		if (tc.note == "") != (stderr == "") || !strings.Contains(stderr, tc.note) {
			t.Errorf("push --recipe %s: stderr %q, want %q", tc.recipe, stderr, tc.note)
		}
	}
	if code, _, stderr := runBuilder(t, "cache", "prune", "--remote", repo, "--cache-dir", dirA); code != exitcode.Usage || !strings.Contains(stderr, "--older-than") {
		t.Errorf("prune --remote without --older-than: exit %d, %s", code, stderr)
	}
}
