package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/ironcore-dev/os-builder/builder"
	"github.com/ironcore-dev/os-builder/builder/programs"
	"github.com/ironcore-dev/os-builder/builder/sources"
)

// TestPlanUsesCarriedInit: `builder build --plan` keys the init step by
// the init the builder carries, as the build does. It planned with none, so
// the release builder (`make builder`) failed outside a source tree
// ("this builder carries none") where the same build worked.
func TestPlanUsesCarriedInit(t *testing.T) {
	tree := t.TempDir()
	rpath := filepath.Join(tree, "recipe.yaml")
	if err := os.WriteFile(rpath, []byte("name: r\nversion: \"1\"\nbase: {distribution: debian, architecture: amd64}\nunitsDir: .\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // no go.mod up from here
	t.Setenv(programs.SourceDirEnv, "")
	os.Unsetenv(programs.SourceDirEnv) // restored by Setenv's cleanup

	saved := Init
	t.Cleanup(func() { Init = saved })
	for _, tc := range []struct {
		name string
		init []byte
	}{
		{name: "one init", init: []byte("\x7fELF init one")},
		{name: "another init", init: []byte("\x7fELF init two")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			carried := programs.PrebuiltInits{FS: fstest.MapFS{programs.PrebuiltInitName("amd64"): {Data: tc.init}}, From: "carried by the test"}
			Init = carried
			var stdout, stderr bytes.Buffer
			code := Main([]string{"build", "--plan", "--json", rpath, "--output", filepath.Join(t.TempDir(), "out"), "--cache-dir", t.TempDir()}, &stdout, &stderr)
			if code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr.String())
			}
			var p builder.Plan
			if err := json.Unmarshal(stdout.Bytes(), &p); err != nil {
				t.Fatalf("plan: %v\n%s", err, stdout.String())
			}
			in, err := sources.NewInit("amd64", carried, nil).Inputs()
			if err != nil {
				t.Fatal(err)
			}
			var got string
			for _, s := range p.Steps {
				if s.Step == "init" {
					got = s.Key
				}
			}
			if want := in.Key(); got != want {
				t.Errorf("plan's init key %q, want %q: the carried init's", got, want)
			}
		})
	}
}
