package cache

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// listTree returns every path under dir (relative), sorted.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// TestPrunePlantedKey: an entry's meta file is not the cache's to trust
// (CI restores the cache from actions/cache). Prune took the lock path
// from the meta's key, so an entry with key "../../x" made it create and
// delete x.lock outside the cache. A planted entry is now skipped, nothing
// outside the cache is created or removed, and the error says which entry
// and why; real entries are still pruned.
func TestPrunePlantedKey(t *testing.T) {
	valid := inputs("k", "planted").Key()
	for _, tc := range []struct {
		name    string // entry directory name
		metaKey string
	}{
		{"key-escapes", "../../x"},
		{valid, "../../x"},
		{valid, "/tmp/x"},
		{valid, inputs("k", "other").Key()},
		{"ABC", "ABC"},
	} {
		t.Run(tc.name+"="+tc.metaKey, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "cache")
			s, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			// Someone else's file where the escaping lock path points.
			outside := filepath.Join(parent, "x.lock")
			if err := os.WriteFile(outside, []byte("not the cache's"), 0o644); err != nil {
				t.Fatal(err)
			}
			real := inputs("k", "real")
			if _, err := s.Fill(context.Background(), "real", real, func(d string) error {
				return os.WriteFile(filepath.Join(d, "f"), []byte("x"), 0o644)
			}); err != nil {
				t.Fatal(err)
			}
			planted := filepath.Join(dir, "entries", tc.name)
			if err := os.MkdirAll(planted, 0o755); err != nil {
				t.Fatal(err)
			}
			meta, _ := json.Marshal(Meta{Step: "planted", Key: tc.metaKey, Format: sealFormat})
			if err := os.WriteFile(filepath.Join(planted, metaFile), meta, 0o644); err != nil {
				t.Fatal(err)
			}
			before := listTree(t, parent)

			_, err = s.Prune(0)
			if err == nil || !strings.Contains(err.Error(), tc.name) || !strings.Contains(err.Error(), "skipped") || !strings.Contains(err.Error(), "not a plain key") && !strings.Contains(err.Error(), "another entry's key") {
				t.Errorf("Prune error %v: want one naming the skipped entry %s and why", err, tc.name)
			}
			if b, err := os.ReadFile(outside); err != nil || string(b) != "not the cache's" {
				t.Errorf("file outside the cache: %q, %v", b, err)
			}
			var outsideNow, outsideBefore []string
			for _, p := range listTree(t, parent) {
				if !strings.HasPrefix(p, "cache") {
					outsideNow = append(outsideNow, p)
				}
			}
			for _, p := range before {
				if !strings.HasPrefix(p, "cache") {
					outsideBefore = append(outsideBefore, p)
				}
			}
			if strings.Join(outsideNow, " ") != strings.Join(outsideBefore, " ") {
				t.Errorf("outside the cache: %q, before %q", outsideNow, outsideBefore)
			}
			if _, err := os.Stat(planted); err != nil {
				t.Errorf("planted entry removed: %v", err)
			}
			if _, ok := s.Lookup(real.Key()); ok {
				t.Errorf("the real entry was not pruned")
			}
			entries, err := s.List()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.Key == tc.metaKey {
					t.Errorf("List shows the planted entry as %q", e.Key)
				}
			}
		})
	}
}

// TestValidKey: only what Inputs.Key makes is a key.
func TestValidKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{inputs("a", "b").Key(), true},
		{strings.Repeat("0", 64), true},
		{strings.Repeat("A", 64), false},
		{strings.Repeat("0", 63), false},
		{strings.Repeat("0", 65), false},
		{"../../x", false},
		{"", false},
		{strings.Repeat("0", 62) + "/.", false},
		{"..", false},
	} {
		if err := ValidKey(tc.key); (err == nil) != tc.ok {
			t.Errorf("ValidKey(%q) = %v, want ok %v", tc.key, err, tc.ok)
		}
	}
}
