package boot_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/redfishemu"
)

// TestRunRefusesInvalidState: a state that cannot belong to the plan ends
// the run with ErrInvalidState before any BMC call, instead of indexing the
// plan with it (done = -1 panicked) or passing for finished (done > steps).
func TestRunRefusesInvalidState(t *testing.T) {
	reg := newRegistry(t)
	img := pushImage(t, reg, "os/state", allKinds(), allMethods(), osimage.BootUEFIHTTP)
	r := newRig(t, img, redfishemu.Options{})
	for _, policy := range []boot.Policy{boot.NetworkBootOnce, boot.NetworkBootAlways} {
		p := r.plan("", policy)
		for _, tc := range []struct {
			name string
			st   boot.State
			want string
		}{
			{"negative", boot.State{PlanDigest: p.Digest(), Done: -1}, "done = -1, must not be negative"},
			{"beyond the plan", boot.State{PlanDigest: p.Digest(), Done: len(p.Steps) + 1},
				fmt.Sprintf("done = %d, but plan %s has %d steps", len(p.Steps)+1, p.Digest(), len(p.Steps))},
			{"no plan", boot.State{Done: 2}, "done = 2 without a planDigest"},
		} {
			t.Run(string(policy)+"/"+tc.name, func(t *testing.T) {
				c := r.connect(t.Context())
				defer c.Close()
				before := r.emu.Requests()
				st := tc.st
				err := r.driver().Run(t.Context(), c, p, &st)
				if !errors.Is(err, boot.ErrInvalidState) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want ErrInvalidState %q", err, tc.want)
				}
				if n := r.emu.Requests() - before; n != 0 {
					t.Errorf("%d BMC requests for an invalid state", n)
				}
			})
		}
		// The bounds themselves are fine: a fresh state and a finished one.
		for _, done := range []int{0, len(p.Steps)} {
			st := boot.State{PlanDigest: p.Digest(), Done: done}
			if err := st.Validate(p); err != nil {
				t.Errorf("done = %d: %v", done, err)
			}
		}
	}
}

func TestLoadStateRefusesInvalidFiles(t *testing.T) {
	dir := t.TempDir()
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, content, want string
	}{
		{"negative", `{"planDigest": "` + digest + `", "done": -1}`, "done = -1, must not be negative"},
		{"no plan", `{"done": 3}`, "done = 3 without a planDigest"},
		{"bad digest", `{"planDigest": "md5:x", "done": 1}`, `planDigest "md5:x" is not sha256:<64 hex digits>`},
		{"not json", `{"done": `, "unexpected end of JSON input"},
		{"too big", `{"conditions": [` + strings.Repeat(`{"type": "x"},`, 80000) + `{}]}`, "larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name+".json")
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := boot.LoadState(p)
			if !errors.Is(err, boot.ErrInvalidState) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("err = %v, want ErrInvalidState naming %s and %q", err, p, tc.want)
			}
		})
	}
	p := filepath.Join(dir, "ok.json")
	if err := boot.SaveState(p, &boot.State{PlanDigest: digest, Done: 4, NetworkBooted: true}); err != nil {
		t.Fatal(err)
	}
	if st, err := boot.LoadState(p); err != nil || st.Done != 4 || !st.NetworkBooted {
		t.Fatalf("round trip: %+v %v", st, err)
	}
}

// FuzzParseState: state files are outside input. Whatever ParseState
// accepts, Validate and Run's indexing must be safe with.
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"planDigest": "sha256:` + strings.Repeat("0", 64) + `", "done": 3, "networkBooted": true}`))
	f.Add([]byte(`{"done": -1}`))
	f.Add([]byte(`{"conditions": [{"type": "Booted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}`))
	p := &boot.Plan{Steps: make([]boot.Step, 7)}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := boot.ParseState(b)
		if err != nil {
			return
		}
		if st.Done < 0 || (st.PlanDigest == "" && st.Done != 0) {
			t.Fatalf("accepted %+v", st)
		}
		st.PlanDigest = p.Digest()
		if err := st.Validate(p); err == nil && (st.Done < 0 || st.Done > len(p.Steps)) {
			t.Fatalf("validated done = %d for %d steps", st.Done, len(p.Steps))
		}
	})
}
