package cache

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func inputs(kv ...string) Inputs {
	var in Inputs
	for i := 0; i < len(kv); i += 2 {
		in.Add(kv[i], kv[i+1])
	}
	return in
}

func TestKeyIsOrderIndependentAndSensitive(t *testing.T) {
	a := inputs("x", "1", "y", "2")
	b := inputs("y", "2", "x", "1")
	c := inputs("x", "1", "y", "3")
	if a.Key() != b.Key() {
		t.Error("same inputs in another order give another key")
	}
	if a.Key() == c.Key() {
		t.Error("changed input gives the same key")
	}
}

func TestDiff(t *testing.T) {
	prev := inputs("bootstrap", "a", "unit:x.service", "1", "gone", "z")
	now := inputs("bootstrap", "a", "unit:x.service", "2", "new", "n")
	got := now.Diff(prev)
	want := []string{"gone (removed)", "new (new)", "unit:x.service"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Diff = %v, want %v", got, want)
	}
}

func TestFillLookupHitMiss(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := inputs("k", "v")
	if _, ok := s.Lookup(in.Key()); ok {
		t.Fatal("hit on an empty cache")
	}
	runs := 0
	fill := func(dir string) error {
		runs++
		return os.WriteFile(filepath.Join(dir, "out"), []byte("hello"), 0o644)
	}
	dir, err := s.Fill(context.Background(), "step", in, fill)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := s.Lookup(in.Key())
	if !ok || got != dir {
		t.Fatalf("Lookup after Fill = %q, %v; want %q", got, ok, dir)
	}
	if b, _ := os.ReadFile(filepath.Join(got, "out")); string(b) != "hello" {
		t.Errorf("entry content = %q", b)
	}
	entries, err := s.List()
	if err != nil || len(entries) != 1 || entries[0].Step != "step" {
		t.Fatalf("List = %+v, %v", entries, err)
	}
	if runs != 1 {
		t.Errorf("fill ran %d times", runs)
	}
}

func TestFailedFillLeavesNoEntry(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := inputs("k", "v")
	boom := errors.New("boom")
	_, err = s.Fill(context.Background(), "step", in, func(dir string) error {
		os.WriteFile(filepath.Join(dir, "half"), []byte("x"), 0o644)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if _, ok := s.Lookup(in.Key()); ok {
		t.Fatal("a failed fill left an entry")
	}
	if des, _ := os.ReadDir(filepath.Join(s.Dir, "tmp")); len(des) != 0 {
		t.Errorf("a failed fill left %d temp dirs", len(des))
	}
}

// TestKilledFillIsSwept kills a process mid-fill (SIGKILL, no cleanup) and
// checks that the next Open removes its leftovers and has no entry.
func TestKilledFillIsSwept(t *testing.T) {
	if os.Getenv("OSB_CACHE_CHILD") != "" {
		s, _ := Open(os.Getenv("OSB_CACHE_CHILD"))
		s.Fill(context.Background(), "step", inputs("k", "v"), func(dir string) error {
			os.WriteFile(filepath.Join(dir, "half"), []byte("x"), 0o644)
			os.WriteFile(filepath.Join(s.Dir, "ready"), nil, 0o644)
			time.Sleep(time.Minute)
			return nil
		})
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledFillIsSwept$")
	cmd.Env = append(os.Environ(), "OSB_CACHE_CHILD="+dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("child never started filling")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup(inputs("k", "v").Key()); ok {
		t.Fatal("killed fill left an entry")
	}
	des, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	for _, d := range des {
		t.Errorf("leftover %s not swept", d.Name())
	}
}

func TestRememberPreviousAndPrune(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := inputs("a", "1")
	if err := s.Remember("recipe", "assemble", in); err != nil {
		t.Fatal(err)
	}
	prev, ok := s.Previous("recipe", "assemble")
	if !ok || prev.Key() != in.Key() {
		t.Fatalf("Previous = %v, %v", prev, ok)
	}
	if _, err := s.Fill(context.Background(), "s", in, func(string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if freed, err := s.Prune(time.Hour); err != nil || freed != 0 {
		t.Fatalf("prune of fresh entries freed %d, %v", freed, err)
	}
	if _, err := s.Prune(0); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup(in.Key()); ok {
		t.Fatal("entry survived prune")
	}
}
