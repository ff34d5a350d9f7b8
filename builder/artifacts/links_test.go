package artifacts

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/recipe"
)

// TestStepOutputLinksStayInside: a step output whose file is a symlink to
// a file outside it (a cache entry made to point at the release job's
// signing key) never puts that file's bytes into an artifact: the writers
// open a step's files inside its directory.
func TestStepOutputLinksStayInside(t *testing.T) {
	testutil.RequireFiles(t, hostStub)
	stub := testutil.ReadFile(t, hostStub)
	secretBytes := []byte("-----BEGIN PRIVATE KEY----- the release job's Secure Boot key")
	for _, tc := range []struct {
		name, file string
		target     func(secret string) string
		outputs    []recipe.Output
	}{
		{"kernel, absolute", step.KernelImage, func(s string) string { return s }, []recipe.Output{recipe.OutputUKI}},
		{"kernel, relative", step.KernelImage, func(string) string { return "../db.key" }, []recipe.Output{recipe.OutputUKI}},
		{"kernel for pxe", step.KernelImage, func(s string) string { return s }, []recipe.Output{recipe.OutputPXE}},
		{"os-release", step.OSReleaseFile, func(s string) string { return s }, []recipe.Output{recipe.OutputUKI}},
		{"kernel-release", step.KernelRelease, func(s string) string { return s }, []recipe.Output{recipe.OutputUKI}},
		{"layer", step.LayerImage, func(s string) string { return s }, []recipe.Output{recipe.OutputPXE}},
		{"initrd without root", "initrd", func(s string) string { return s }, []recipe.Output{recipe.OutputUKI}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			secret := filepath.Join(parent, "db.key")
			if err := os.WriteFile(secret, secretBytes, 0o600); err != nil {
				t.Fatal(err)
			}
			asm := filepath.Join(parent, "step")
			if err := os.Mkdir(asm, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, data := range map[string][]byte{
				step.KernelImage:   []byte("MZ kernel"),
				step.KernelRelease: []byte("6.1.0-test\n"),
				step.OSReleaseFile: []byte("ID=debian\n"),
				step.StubFile:      stub,
				step.LayerImage:    []byte("hsqs layer"),
				"initrd":           []byte("cpio"),
			} {
				p := filepath.Join(asm, name)
				var err error
				if name == tc.file {
					err = os.Symlink(tc.target(secret), p)
				} else {
					err = os.WriteFile(p, data, 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			out := t.TempDir()
			r := recipe.Recipe{Outputs: tc.outputs}
			cfg := Config{Outputs: r.OutputSet(), Arch: "amd64", Name: "t", Version: "1", Builder: "b", Cmdline: "console=ttyS0"}
			in := testInputs(step.Stack{Layers: []step.Layer{{Dir: asm, Name: step.TopLayer}}}, asm, asm, filepath.Join(asm, "initrd"))
			_, err := writeAll(t.Context(), cfg, in, out)
			if err == nil {
				t.Errorf("%s links out of its step's directory, and the artifacts were written", tc.file)
			}
			filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return err
				}
				if bytes.Contains(testutil.ReadFile(t, p), secretBytes) {
					t.Errorf("%s holds the bytes of the file %s links to", p, tc.file)
				}
				return nil
			})
		})
	}
}
