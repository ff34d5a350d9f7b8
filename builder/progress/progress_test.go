package progress

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestReporterModes: a step's own progress reaches each output mode: the
// live block on a terminal (redrawn in place), periodic lines in plain
// mode, progress events in JSON; every mode ends the step with its result.
func TestReporterModes(t *testing.T) {
	defer func(d time.Duration) { PlainEvery = d }(PlainEvery)
	PlainEvery = 0
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"tty", []string{"\033[1A\r\033[J", "bootstrap", "running", "3 of 10 packages", "bootstrap                        built in", "go:x                             FAILED after"}},
		{ModePlain, []string{"bootstrap: start", "bootstrap: running 1s  3 of 10 packages", "bootstrap                        built in", "go:x                             FAILED after"}},
		{ModeJSON, []string{`{"step":"bootstrap","state":"start"`, `"state":"progress","done":3,"total":10,"unit":"packages"`, `"step":"go:x","state":"failed"`, `"error":"boom"`}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			var out testutil.SyncBuffer
			r := New(&out, false, tc.mode)
			r.BeginStep("bootstrap")
			r.BeginStep("go:x")
			ctx := WithMeter(context.Background(), r, "bootstrap")
			Report(ctx, 3, 10, "packages")
			// One tick of every mode shows the progress; a loaded machine
			// may take longer.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				if s := out.String(); strings.Contains(s, "3 of 10") || strings.Contains(s, `"done":3`) {
					break
				}
			}
			time.Sleep(1100 * time.Millisecond)
			r.EndStep("go:x", errors.New("boom"), 0)
			r.EndStep("bootstrap", nil, 1<<20)
			r.Close()
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%q", w, out.String())
				}
			}
			if tc.mode == ModeJSON {
				for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
					var e Event
					dec := json.NewDecoder(strings.NewReader(line))
					dec.DisallowUnknownFields()
					if err := dec.Decode(&e); err != nil {
						t.Errorf("progress line %q: %v", line, err)
					}
				}
			}
			rows := r.Summary()
			if len(rows) != 2 || rows[0].Step != "bootstrap" || rows[0].Size != 1<<20 || !rows[1].Failed {
				t.Errorf("summary %+v", rows)
			}
		})
	}
}

// TestWrittenBytes: a file sized first and written in part counts the
// bytes written, not its size; a file written whole counts its size.
func TestWrittenBytes(t *testing.T) {
	dir := t.TempDir()
	sparse, err := os.Create(filepath.Join(dir, "disk.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer sparse.Close()
	buildertest.Must(t, sparse.Truncate(64<<20))
	_, err = sparse.WriteAt(make([]byte, 1<<20), 8<<20)
	buildertest.Must(t, err)
	buildertest.Must(t, os.WriteFile(filepath.Join(dir, "uki.efi"), []byte("uki"), 0o644))
	got := WrittenBytes(dir)
	if got < 1<<20+3 || got > 2<<20 {
		t.Errorf("written bytes %d, want the 1 MiB written plus 3 (not the 64 MiB size)", got)
	}
}
