package builder

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArtifactInputErrors: what the image lacks or holds broken must come
// back as an error that says what to do, before anything is written.
func TestArtifactInputErrors(t *testing.T) {
	writeFiles := func(t *testing.T, files map[string]string) string {
		dir := t.TempDir()
		for name, data := range files {
			p := filepath.Join(dir, name)
			os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	complete := map[string]string{
		kernelImage:   "MZ kernel",
		kernelRelease: "6.1.0-test\n",
		osReleaseFile: "ID=debian\n",
		stubFile:      "not a PE file",
		layerImage:    "hsqs layer",
	}
	for _, tc := range []struct {
		name    string
		drop    string
		want    string
		outputs []string
	}{
		{name: "missing stub", drop: stubFile, want: "no systemd-stub in the image (package systemd-boot-efi)", outputs: []string{"uki"}},
		{name: "corrupted stub", want: "parsing stub: not a PE image", outputs: []string{"uki"}},
		{name: "missing stub for iso", drop: stubFile, want: "systemd-boot-efi", outputs: []string{"iso"}},
		{name: "unknown output", want: `unknown output "floppy"`, outputs: []string{"floppy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range complete {
				if k != tc.drop {
					files[k] = v
				}
			}
			asm := writeFiles(t, files)
			initrd := filepath.Join(asm, "initrd")
			os.WriteFile(initrd, []byte("cpio"), 0o644)
			out := t.TempDir()
			set, err := parseOutputs(tc.outputs)
			if err == nil {
				_, err = writeArtifacts(t.Context(), set, &artifactInputs{layers: []rootLayer{{asm, topLayerInitrd}}, assembled: asm, kernelDir: asm, noRootInitrd: initrd, arch: "amd64", name: "t", version: "1"}, out)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if left, _ := os.ReadDir(out); len(left) != 0 {
				t.Errorf("a failed artifact left %d files", len(left))
			}
		})
	}
}

// TestLiftWithoutKernel: an image without a kernel package cannot boot, and
// the error names the package to add.
func TestLiftWithoutKernel(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755)
	err := liftKernel(openRoot(t, root), testRecipe(t).Base.Architecture, nil, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "no kernel in the image: add linux-image-amd64") {
		t.Fatalf("err = %v", err)
	}
}
