package cache

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestRememberConcurrently: builds sharing a cache remember the same step at
// the same time; none of them may fail (they all shared one ".tmp" name).
func TestRememberConcurrently(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const writers, rounds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				if err := s.Remember("test", "assemble", inputs("w", fmt.Sprint(w), "i", fmt.Sprint(i))); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if in, ok := s.Previous("test", "assemble"); !ok || len(in) != 2 {
		t.Errorf("Previous = %v, %v; want one writer's inputs", in, ok)
	}
	if des, _ := os.ReadDir(filepath.Join(s.Dir, "last")); len(des) != 1 {
		t.Errorf("last/ holds %d files, want 1", len(des))
	}
}

// TestConcurrentFillsRunOnce: builds wanting the same step wait for one
// filler instead of all computing it.
func TestConcurrentFillsRunOnce(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := inputs("k", "v")
	var runs atomic.Int32
	var wg sync.WaitGroup
	dirs := make([]string, 4)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.Fill(context.Background(), "step", in, func(dir string) error {
				runs.Add(1)
				time.Sleep(300 * time.Millisecond)
				return os.WriteFile(filepath.Join(dir, "out"), []byte("x"), 0o644)
			})
			if err != nil {
				t.Error(err)
			}
			dirs[i] = d
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Errorf("fill ran %d times, want 1", n)
	}
	for _, d := range dirs {
		if d != s.Path(in.Key()) {
			t.Errorf("Fill returned %q, want %q", d, s.Path(in.Key()))
		}
	}
}

// helperChild runs the role named by $OSB_CACHE_ROLE in a child process of
// the test binary; it reports true when it ran as the child.
func helperChild(t *testing.T) bool {
	role, dir := os.Getenv("OSB_CACHE_ROLE"), os.Getenv("OSB_CACHE_DIR_UNDER_TEST")
	if role == "" {
		return false
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	switch role {
	case "fill-and-hang":
		s.Fill(context.Background(), "step", inputs("k", "v"), func(d string) error {
			os.WriteFile(filepath.Join(d, "half"), []byte("x"), 0o644)
			os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
			time.Sleep(time.Minute)
			return nil
		})
	case "sweep":
		// Open swept; nothing else to do.
	}
	return true
}

func startChild(t *testing.T, cmd *exec.Cmd, role, dir string) {
	t.Helper()
	cmd.Env = append(os.Environ(), "OSB_CACHE_ROLE="+role, "OSB_CACHE_DIR_UNDER_TEST="+dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// halfFilled counts temp directories holding the hanging child's file.
func halfFilled(dir string) int {
	m, _ := filepath.Glob(filepath.Join(dir, "tmp", "*", "half"))
	return len(m)
}

// TestSweeperInAnotherPIDNamespaceSparesLiveFill is the shared cache volume
// of two containers: a fill runs in one PID namespace (as PID 2 there), a
// build in another (as PID 1) opens the cache and sweeps. PIDs of the other
// namespace mean nothing to it; the fill's lock does.
func TestSweeperInAnotherPIDNamespaceSparesLiveFill(t *testing.T) {
	if helperChild(t) {
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs unshare and root for PID namespaces")
	}
	dir := t.TempDir()
	self, _ := filepath.Abs(os.Args[0])
	run := "-test.run=^TestSweeperInAnotherPIDNamespaceSparesLiveFill$"
	// The filler runs as PID ~200 of its namespace, as a build in a busy
	// container would; the sweeper's namespace has no such PID.
	filler := exec.Command(unshare, "-p", "-f", "--mount-proc", "--kill-child", "sh", "-c",
		`i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done; "$0" "$1" & wait`, self, run)
	startChild(t, filler, "fill-and-hang", dir)
	defer func() { filler.Process.Kill(); filler.Wait() }()
	waitFor(t, filepath.Join(dir, "ready"))

	sweeper := exec.Command(unshare, "-p", "-f", "--mount-proc", "sh", "-c", `exec "$0" "$1"`, self, run)
	startChild(t, sweeper, "sweep", dir)
	if err := sweeper.Wait(); err != nil {
		t.Fatalf("sweeper: %v", err)
	}
	if halfFilled(dir) != 1 {
		t.Fatal("a sweeper in another PID namespace removed a live fill")
	}

	filler.Process.Signal(syscall.SIGKILL)
	filler.Wait()
	// --kill-child takes the namespace down; its lock goes with it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if halfFilled(dir) == 0 {
			if _, ok := s.Lookup(inputs("k", "v").Key()); ok {
				t.Fatal("killed fill left an entry")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed fill's directory was never swept")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWaiterTakesOverFromKilledFiller: a build waiting for another's fill of
// the same key fills it itself when that build is killed.
func TestWaiterTakesOverFromKilledFiller(t *testing.T) {
	if helperChild(t) {
		return
	}
	dir := t.TempDir()
	filler := exec.Command(os.Args[0], "-test.run=^TestWaiterTakesOverFromKilledFiller$")
	startChild(t, filler, "fill-and-hang", dir)
	defer func() { filler.Process.Kill(); filler.Wait() }()
	waitFor(t, filepath.Join(dir, "ready"))

	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	var waited atomic.Bool
	s.Log = func(string, ...any) { waited.Store(true) }
	go func() {
		time.Sleep(time.Second)
		filler.Process.Kill()
	}()
	ran := false
	p, err := s.Fill(context.Background(), "step", inputs("k", "v"), func(d string) error {
		ran = true
		return os.WriteFile(filepath.Join(d, "out"), []byte("whole"), 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !waited.Load() || !ran {
		t.Errorf("waited for the filler: %v; filled after it died: %v", waited.Load(), ran)
	}
	if b, _ := os.ReadFile(filepath.Join(p, "out")); string(b) != "whole" {
		t.Errorf("entry holds %q", b)
	}
	if _, err := os.Stat(filepath.Join(p, "half")); err == nil {
		t.Error("the killed filler's file got into the entry")
	}
}

// TestWaitingFillHonoursContext: an interrupted build stops waiting.
func TestWaitingFillHonoursContext(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := inputs("k", "v")
	started := make(chan struct{})
	release := make(chan struct{})
	go s.Fill(context.Background(), "step", in, func(string) error {
		close(started)
		<-release
		return nil
	})
	defer close(release)
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := s.Fill(ctx, "step", in, func(string) error { return nil }); err != context.DeadlineExceeded {
		t.Fatalf("err = %v, want %v", err, context.DeadlineExceeded)
	}
}
