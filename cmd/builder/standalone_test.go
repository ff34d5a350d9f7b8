package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/zstd"

	"github.com/ironcore-dev/os-builder/builder/programs"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
)

// TestStandaloneBuilder: a builder from `make builder` is all it takes to
// build recipes/test.yaml. It runs from an empty directory outside the
// source tree with no go on PATH, and the initrd's /init is byte for byte
// the init a source tree build makes. The bootstrap and assemble steps come
// from $OSB_CACHE_DIR when an earlier build filled it; nothing boots (the
// boot tests boot this same init).
func TestStandaloneBuilder(t *testing.T) {
	if testing.Short() && !testutil.CI() {
		t.Skip("builds the builder and an image")
	}
	testutil.RequireTool(t, "go")
	makeBin := testutil.RequireTool(t, "make")
	testutil.RequireTool(t, "mmdebstrap")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	_, self, _, _ := runtime.Caller(0)
	src := filepath.Join(filepath.Dir(self), "..", "..")

	bin := t.TempDir()
	start := time.Now()
	mk := exec.CommandContext(ctx, makeBin, "-C", src, "builder", "BIN="+bin)
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make builder: %v\n%s", err, out)
	}
	t.Logf("make builder: %v", time.Since(start).Round(time.Millisecond))

	// The recipe and its files, copied away from the source tree.
	work := t.TempDir()
	for _, d := range []string{"recipes", "units"} {
		if err := os.CopyFS(filepath.Join(work, d), os.DirFS(filepath.Join(src, d))); err != nil {
			t.Fatal(err)
		}
	}
	path := pathWithout(t, "go")
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "builder"), "build", "recipes/test.yaml", "--output", "out", "--json")
	cmd.Dir = work
	cmd.Env = append(envWithout("PATH", "GOROOT", programs.SourceDirEnv), "PATH="+path)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start = time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("builder build: %v\n%s", err, stderr.String())
	}
	t.Logf("builder build: %v", time.Since(start).Round(time.Millisecond))
	// With no go on PATH the init can only be the carried one; the log
	// says so unless an earlier run cached the init step under the same
	// key (the carried init's bytes).
	if !strings.Contains(stderr.String(), "init: carried by the builder") && !strings.Contains(stderr.String(), `{"step":"init","state":"done","elapsed"`) {
		t.Errorf("build log says nothing of the init:\n%s", stderr.String())
	}

	want := filepath.Join(t.TempDir(), "init")
	if err := programs.BuildInitBinary(ctx, want, "amd64"); err != nil {
		t.Fatal(err)
	}
	wantInit := testutil.ReadFile(t, want)

	var m osimage.BuildManifest
	if err := json.Unmarshal(testutil.ReadFile(t, filepath.Join(work, "out", osimage.ManifestFile)), &m); err != nil {
		t.Fatal(err)
	}
	if m.Recipe != "test" || m.Architecture != "amd64" || len(m.Artifacts) == 0 {
		t.Errorf("manifest: recipe %q arch %q, %d artifacts", m.Recipe, m.Architecture, len(m.Artifacts))
	}
	if m.Init == nil || m.Init.SHA256 != testutil.FileSHA256(t, want) || m.Init.GoVersion == "" {
		t.Errorf("manifest init %+v, want sha256 %s of the source tree's init", m.Init, testutil.FileSHA256(t, want))
	}
	// Every artifact the test recipe's outputs make, as the manifest says.
	kinds := map[osimage.ArtifactKind]bool{}
	for _, a := range m.Artifacts {
		kinds[a.Kind] = true
		fi, err := os.Stat(filepath.Join(work, "out", a.Path))
		if err != nil || fi.Size() != a.Size {
			t.Errorf("%s: %v, manifest says %d bytes", a.Path, err, a.Size)
		}
	}
	for _, k := range []osimage.ArtifactKind{osimage.KindKernel, osimage.KindInitrd, osimage.KindRootfs, osimage.KindInitrdNoRoot,
		osimage.KindCmdline, osimage.KindUKI, osimage.KindDisk, osimage.KindISO} {
		if !kinds[k] {
			t.Errorf("manifest lists no %s", k)
		}
	}
	if a := artifact(t, &m, osimage.KindInitrdNoRoot); testutil.FileSHA256(t, filepath.Join(work, "out", a.Path)) != a.SHA256 {
		t.Errorf("%s: sha256 differs from the manifest's", a.Path)
	}
	var printed osimage.BuildManifest
	if err := json.Unmarshal(stdout.Bytes(), &printed); err != nil || printed.Init == nil || printed.Init.SHA256 != m.Init.SHA256 {
		t.Errorf("--json printed init %+v (%v)", printed.Init, err)
	}
	noRoot := filepath.Join(work, "out", artifact(t, &m, osimage.KindInitrdNoRoot).Path)
	if got := initrdFile(t, noRoot, "init"); !bytes.Equal(got, wantInit) {
		t.Errorf("%s: /init (%d bytes) differs from the source tree's init (%d bytes)", noRoot, len(got), len(wantInit))
	}
	// The live initrd is the root's layer segments, then initrd-noroot
	// byte for byte: the same init.
	live := testutil.ReadFile(t, filepath.Join(work, "out", artifact(t, &m, osimage.KindInitrd).Path))
	if !bytes.HasSuffix(live, testutil.ReadFile(t, noRoot)) {
		t.Errorf("initrd.img does not end with initrd-noroot.img")
	}
}

// pathWithout is $PATH minus every directory holding an executable name.
func pathWithout(t *testing.T, name string) string {
	t.Helper()
	var keep []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if fi, err := os.Stat(filepath.Join(d, name)); err == nil && fi.Mode()&0o111 != 0 {
			continue
		}
		keep = append(keep, d)
	}
	path := strings.Join(keep, string(filepath.ListSeparator))
	check := exec.Command("sh", "-c", "command -v "+name)
	check.Env = []string{"PATH=" + path}
	if out, err := check.Output(); err == nil {
		t.Fatalf("%s still on PATH at %s", name, out)
	}
	return path
}

func envWithout(names ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			env = append(env, kv)
		}
	}
	return env
}

func artifact(t *testing.T, m *osimage.BuildManifest, kind osimage.ArtifactKind) osimage.Artifact {
	t.Helper()
	for _, a := range m.Artifacts {
		if a.Kind == kind {
			return a
		}
	}
	t.Fatalf("manifest has no %s artifact", kind)
	return osimage.Artifact{}
}

// initrdFile returns one file of a zstd newc initrd.
func initrdFile(t *testing.T, path, name string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	cr := cpio.NewReader(zr)
	for {
		h, err := cr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s holds no %s", path, name)
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if strings.TrimPrefix(h.Name, "/") == name {
			b, err := io.ReadAll(cr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
