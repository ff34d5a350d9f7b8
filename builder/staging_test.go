package builder

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestStagingSweepSparesLiveBuildInOtherPIDNamespace: a build in another PID
// namespace (a container sharing the output volume) stages under a name
// whose PID means nothing here; it holds its lock, so the sweep of a second
// build must leave it alone, while the staging of a dead build goes.
func TestStagingSweepSparesLiveBuildInOtherPIDNamespace(t *testing.T) {
	flock := testutil.RequireTool(t, "flock")
	dir := t.TempDir()
	final := filepath.Join(dir, "out")
	// The name an old builder in a container with PID 999999 would have used.
	live := filepath.Join(dir, ".out.staging-999999-123")
	dead := filepath.Join(dir, ".out.staging-999998-456")
	for _, d := range []string{live, dead} {
		if err := os.MkdirAll(filepath.Join(d, "x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	holder := exec.Command(flock, "--exclusive", live, "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	waitLocked(t, live)

	removeStaleStaging(final)

	if _, err := os.Stat(filepath.Join(live, "x")); err != nil {
		t.Errorf("the live staging directory of another build was swept: %v", err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead build's staging directory was kept (err %v)", err)
	}

	// Staging of our own is locked as long as it lives.
	stage, unlock, err := newStaging(final)
	if err != nil {
		t.Fatal(err)
	}
	removeStaleStaging(final)
	if _, err := os.Stat(stage); err != nil {
		t.Errorf("a build swept its own live staging directory: %v", err)
	}
	unlock()
	removeStaleStaging(final)
	if _, err := os.Stat(stage); !os.IsNotExist(err) {
		t.Errorf("an unlocked staging directory was kept (err %v)", err)
	}
}

// waitLocked waits until another process holds the flock on dir.
func waitLocked(t *testing.T, dir string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		f, err := lockDir(dir)
		if err != nil {
			return
		}
		f.Close()
	}
	t.Fatalf("%s never got locked", dir)
}
