package builder

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/cache"
)

// writeStep is the smallest real step: it writes one file.
type writeStep struct{ runs int }

func (s *writeStep) Name() string { return "write" }
func (s *writeStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("content", "hello")
	return in, nil
}
func (s *writeStep) Run(_ context.Context, out string) error {
	s.runs++
	return os.WriteFile(filepath.Join(out, "f"), []byte("hello"), 0o644)
}

// TestFailedRememberIsNotABuildError: when the cache cannot record a step's
// inputs (for --explain), the step's good output is still used; the failure
// is logged, on a fill and on a hit.
func TestFailedRememberIsNotABuildError(t *testing.T) {
	dir := t.TempDir()
	store, err := cache.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	// last/ is now a file: every Remember fails.
	if err := os.RemoveAll(filepath.Join(dir, "last")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "last"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	r := cachedRunner{store: store, scope: "test", log: progress.New(&log, false, progress.ModeAuto)}
	step := &writeStep{}
	for i, what := range []string{"fill", "hit"} {
		out, err := r.Run(context.Background(), step)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "f")); string(b) != "hello" {
			t.Errorf("%s: output holds %q", what, b)
		}
		if n := strings.Count(log.String(), "warning: cache remember"); n != i+1 {
			t.Errorf("%s: %d remember warnings logged, want %d:\n%s", what, n, i+1, log.String())
		}
	}
	if step.runs != 1 {
		t.Errorf("step ran %d times, want 1", step.runs)
	}
}
