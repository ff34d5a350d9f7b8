package artifacts

import (
	"bytes"
	"context"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/initrd/layout"
	"github.com/ironcore-dev/os-builder/initrd/rootstack"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
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
		step.KernelImage:   "MZ kernel",
		step.KernelRelease: "6.1.0-test\n",
		step.OSReleaseFile: "ID=debian\n",
		step.StubFile:      "not a PE file",
		step.LayerImage:    "hsqs layer",
	}
	for _, tc := range []struct {
		name    string
		drop    string
		want    string
		outputs []recipe.Output
	}{
		{name: "missing stub", drop: step.StubFile, want: "no systemd-stub in the image (package systemd-boot-efi)", outputs: []recipe.Output{recipe.OutputUKI}},
		{name: "corrupted stub", want: "parsing stub: not a PE image", outputs: []recipe.Output{recipe.OutputUKI}},
		{name: "missing stub for iso", drop: step.StubFile, want: "systemd-boot-efi", outputs: []recipe.Output{recipe.OutputISO}},
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
			r := recipe.Recipe{Outputs: tc.outputs}
			cfg := Config{Outputs: r.OutputSet(), Arch: "amd64", Name: "t", Version: "1", Builder: "b"}
			in := testInputs(step.Stack{Layers: []step.Layer{{Dir: asm, Name: step.TopLayer}}}, asm, asm, initrd)
			_, err := writeAll(t.Context(), cfg, in, out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
			if left, _ := os.ReadDir(out); len(left) != 0 {
				t.Errorf("a failed artifact left %d files", len(left))
			}
		})
	}
}

// TestPXEArtifactsFromLayers: the pxe artifacts are joined from the layers
// (root stack, live initrd = layer segments then the initrd without root),
// hashed while written, and the root artifact cannot be mistaken for a
// lone squashfs: it starts with the stack's magic, not the base's.
func TestPXEArtifactsFromLayers(t *testing.T) {
	base, bins, asm := t.TempDir(), t.TempDir(), t.TempDir()
	files := map[string]string{
		filepath.Join(base, step.LayerImage): "hsqs base image",
		filepath.Join(bins, step.LayerImage): "hsqs binaries image",
		filepath.Join(asm, step.LayerImage):  "hsqs top image",
		filepath.Join(asm, step.KernelImage): "MZ kernel",
		filepath.Join(asm, "noroot.img"):     "init segment",
	}
	testutil.RequireFiles(t, hostStub)
	files[filepath.Join(asm, step.StubFile)] = string(testutil.ReadFile(t, hostStub))
	for p, data := range files {
		buildertest.Must(t, os.WriteFile(p, []byte(data), 0o644))
	}
	layers := []step.Layer{{Dir: base, Name: step.BaseLayer}, {Dir: bins, Name: step.BinariesLayer}, {Dir: asm, Name: step.TopLayer}}
	out := t.TempDir()
	cfg := Config{Outputs: recipe.OutputSet{recipe.OutputPXE: true}, Cmdline: "console=ttyS0", Builder: "b", Arch: "amd64"}
	arts, err := writeAll(t.Context(), cfg, testInputs(step.Stack{Layers: layers}, asm, asm, filepath.Join(asm, "noroot.img")), out)
	buildertest.Must(t, err)
	// kernel, live initrd, root, initrd without root, cmdline; no stub:
	// without a UKI-bearing output the image has no systemd-boot-efi
	// (recipe.OutputSet.NeedsStub), so pxe alone ships none.
	if len(arts) != 5 {
		t.Fatalf("%d artifacts, want 5: %+v", len(arts), arts)
	}
	for _, a := range arts {
		if a.Kind == osimage.KindStub {
			t.Errorf("pxe alone shipped %+v", a)
		}
	}
	for _, a := range arts {
		p := filepath.Join(out, a.Path)
		if got := testutil.FileSHA256(t, p); got != a.SHA256 {
			t.Errorf("%s: digest %s while writing, file %s", a.Path, a.SHA256, got)
		}
	}
	// The segments, as the kernel unpacks them: each layer's image at its
	// name in the root layers directory, then the init's archive.
	initrdImg := testutil.ReadFile(t, filepath.Join(out, FileInitrd))
	r := bytes.NewReader(initrdImg)
	skipPadding := func() { // between segments, as the kernel does
		for {
			b, err := r.ReadByte()
			if err != nil {
				return
			}
			if b != 0 {
				r.UnreadByte()
				return
			}
		}
	}
	for _, l := range layers {
		skipPadding()
		cr := cpio.NewReader(r)
		var names []string
		for {
			h, err := cr.Next()
			if err == io.EOF {
				break
			}
			buildertest.Must(t, err)
			names = append(names, h.Name)
			if h.Mode.IsRegular() {
				data, err := io.ReadAll(cr)
				buildertest.Must(t, err)
				if want := testutil.ReadFile(t, l.Image()); !bytes.Equal(data, want) {
					t.Errorf("segment %s holds %q, want %q", l.Name, data, want)
				}
			}
		}
		dir := strings.TrimPrefix(layout.RootLayersDir, "/")
		if want := []string{dir, path.Join(dir, l.Name)}; !slices.Equal(names, want) {
			t.Errorf("segment %s: entries %q, want %q", l.Name, names, want)
		}
	}
	skipPadding()
	if rest, _ := io.ReadAll(r); string(rest) != "init segment" {
		t.Errorf("initrd.img ends with %q after the layer segments, want the init segment", rest)
	}
	root := testutil.ReadFile(t, filepath.Join(out, FileRootfs))
	if !rootstack.IsStack(root) {
		t.Fatalf("root.squashfs starts with %q, want the root stack magic", root[:8])
	}
	parts, err := rootstack.Parse(root[:rootstack.HeaderSize], int64(len(root)))
	buildertest.Must(t, err)
	for i, want := range []string{"hsqs base image", "hsqs binaries image", "hsqs top image"} {
		if got := string(root[parts[i].Offset : parts[i].Offset+parts[i].Size]); got != want {
			t.Errorf("part %d = %q, want %q", i, got, want)
		}
	}
}

// writeAll runs the writers of cfg's outputs into dir one after another,
// in the order the build's graph may run them, and removes what they put
// aside, as a build does.
func writeAll(ctx context.Context, cfg Config, in Inputs, dir string) (arts []osimage.Artifact, err error) {
	defer func() {
		if rerr := RemoveAside(dir); err == nil && rerr != nil {
			arts, err = nil, rerr
		}
	}()
	for _, w := range Writers(cfg, in, dir) {
		a, err := w.Write(ctx)
		if err != nil {
			return nil, err
		}
		w.Done()
		arts = append(arts, a...)
	}
	Sort(arts)
	return arts, nil
}

// testInputs are writer inputs with every value set: the root's layers,
// the assemble and kernel steps' outputs and the initrd without root.
func testInputs(stack step.Stack, assembled, kernel, noRoot string) Inputs {
	in := Inputs{
		Stack:     step.NewValue[step.Stack]("assemble", "the root's layers"),
		Assembled: step.NewValue[step.Assembled]("assemble", "os-release, the stub, the init's tools"),
		Kernel:    step.NewValue[step.Kernel]("kernel", "the kernel and its modules"),
		NoRoot:    step.NewValue[string]("initrd-noroot", "the initrd without root"),
	}
	in.Stack.Set(stack)
	in.Assembled.Set(step.Assembled{Dir: assembled})
	in.Kernel.Set(step.Kernel{Dir: kernel})
	in.NoRoot.Set(noRoot)
	return in
}
