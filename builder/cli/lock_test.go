package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/crane"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
)

// pushTool pushes a linux/amd64 image holding /usr/local/bin/tool (body)
// as ref; label changes the digest and nothing the build extracts.
func pushTool(t *testing.T, ref, body, label string) string {
	t.Helper()
	img, err := crane.Image(map[string][]byte{"usr/local/bin/tool": []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	return testutil.PushImage(t, ref, testutil.LinuxImage(t, img, "amd64", map[string]string{"osb.test": label}))
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func toolsLayer(image string) string {
	return "name: tools\noci:\n  - image: " + image + "\n    paths: {/usr/local/bin/tool: /usr/local/bin/osb-tool}\n"
}

func run(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := Main(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestLockCommand: `builder lock` writes RECIPE.lock and says what it
// changed; a --locked build refuses, as bad usage (exit 2) and before any
// step runs, a source the lock lacks and a stale lock, naming the layer
// file and line.
func TestLockCommand(t *testing.T) {
	reg := testutil.NewRegistry(t)
	ref := reg + "/osb/tool:t"
	digest := pushTool(t, ref, "tool\n", "a")
	dir := t.TempDir()
	t.Chdir(dir)
	writeFiles(t, dir, map[string]string{
		"recipe.yaml": "name: r\nversion: \"1\"\nbase: {distribution: debian}\nunitsDir: .\nlayers: [layer.yaml]\n",
		"layer.yaml":  toolsLayer(ref),
	})

	// Unlocked: refused with --locked, before the build starts.
	code, _, stderr := run("build", "recipe.yaml", "--locked", "--output", "out", "--cache-dir", t.TempDir())
	if want := "builder: layer.yaml:3: oci[0].image: oci " + ref + " of layer tools is not locked in recipe.lock (no such file)\n"; code != ExitUsage || !strings.HasPrefix(stderr, want) {
		t.Errorf("unlocked --locked build: exit %d, stderr:\n%s\nwant exit 2 and:\n%s", code, stderr, want)
	}

	code, stdout, stderr := run("lock", "recipe.yaml")
	if code != ExitOK || stdout != "added    tools oci "+ref+" "+digest+"\nrecipe.lock: 1 source(s), 1 change(s)\n" {
		t.Fatalf("lock: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	lock, err := os.ReadFile("recipe.lock")
	if err != nil || !strings.Contains(string(lock), `digest: "`+digest+`"`) {
		t.Fatalf("recipe.lock: %s %v", lock, err)
	}
	if code, stdout, _ := run("lock", "recipe.yaml"); code != ExitOK || stdout != "recipe.lock: 1 source(s), 0 change(s)\n" {
		t.Errorf("second lock: exit %d, %q", code, stdout)
	}

	// The layer moves to a tag the lock does not have: stale.
	writeFiles(t, dir, map[string]string{"layer.yaml": toolsLayer(reg + "/osb/tool:t2")})
	code, _, stderr = run("build", "recipe.yaml", "--locked", "--output", "out", "--cache-dir", t.TempDir())
	for _, want := range []string{
		"recipe.lock:5: sources[0]: stale: layer tools has no oci source " + ref + "; run `builder lock recipe.yaml`",
		"layer.yaml:3: oci[0].image: oci " + reg + "/osb/tool:t2 of layer tools is not locked in recipe.lock",
	} {
		if code != ExitUsage || !strings.Contains(stderr, want) {
			t.Errorf("stale --locked build: exit %d, stderr lacks %q:\n%s", code, want, stderr)
		}
	}
	if _, err := os.Stat("out"); !os.IsNotExist(err) {
		t.Errorf("a refused build left an output: %v", err)
	}

	// Bad usage of lock itself.
	for _, args := range [][]string{{"lock", "recipe.yaml", "tools"}, {"lock", "recipe.yaml", "--update", "nope"}, {"lock"}} {
		if code, _, stderr := run(args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want 2; stderr:\n%s", args, code, stderr)
		}
	}
	if err := os.WriteFile("recipe.lock", []byte("version: 1\nsources: [1]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run("lock", "recipe.yaml"); code != ExitUsage || !strings.Contains(stderr, "recipe.lock:2: sources[0]: expected a mapping") {
		t.Errorf("lock over a broken lock: exit %d, stderr:\n%s", code, stderr)
	}
}

// TestLockedBuildManifest builds the test recipe plus a layer that takes a
// tool from a real registry by tag: the build uses the lock's digest after
// the tag moved, --locked passes, and without a lock entry the build
// resolves the tag, warns and records it in manifest.json, while --locked
// refuses.
func TestLockedBuildManifest(t *testing.T) {
	testutil.RequireTool(t, "mmdebstrap")
	testutil.RequireTool(t, "mksquashfs")
	if testing.Short() {
		t.Skip("builds an image")
	}
	reg := testutil.NewRegistry(t)
	ref := reg + "/osb/tool:t"
	digestA := pushTool(t, ref, "tool from a registry\n", "a")

	tree := t.TempDir()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"recipes", "units"} {
		testutil.Run(t, "cp", "-a", filepath.Join(root, d), tree)
	}
	recipePath := filepath.Join(tree, "recipes/test.yaml")
	b, err := os.ReadFile(recipePath)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, tree, map[string]string{
		"recipes/test.yaml":         strings.Replace(string(b), "layers:\n", "layers:\n  - layers/tools.yaml\n", 1),
		"recipes/layers/tools.yaml": toolsLayer(ref),
	})
	cacheDir := cache.DefaultDir()
	out := filepath.Join(tree, "out")
	build := func(want int, extra ...string) (string, *osimage.BuildManifest) {
		t.Helper()
		code, _, stderr := run(append([]string{"build", recipePath, "--output", out, "--cache-dir", cacheDir}, extra...)...)
		if code != want {
			t.Fatalf("build %v: exit %d, want %d; stderr:\n%s", extra, code, want, stderr)
		}
		if code != ExitOK {
			return stderr, nil
		}
		m, err := osimage.ReadManifest(out)
		if err != nil {
			t.Fatal(err)
		}
		return stderr, m
	}
	sourcesOf := func(m *osimage.BuildManifest) string {
		j, _ := json.Marshal(m.Sources)
		return string(j)
	}

	if code, _, stderr := run("lock", recipePath); code != ExitOK {
		t.Fatalf("lock: exit %d\n%s", code, stderr)
	}
	pushTool(t, ref, "tool from a registry\n", "b") // the tag moves on
	want := `[{"layer":"tools","kind":"oci","ref":"` + ref + `","digest":"` + digestA + `","origin":"lock"}]`
	for _, extra := range [][]string{nil, {"--locked"}} {
		stderr, m := build(ExitOK, extra...)
		if got := sourcesOf(m); got != want {
			t.Errorf("build %v: manifest sources %s, want %s", extra, got, want)
		}
		if strings.Contains(stderr, "warning") {
			t.Errorf("build %v warned:\n%s", extra, stderr)
		}
	}

	// No lock entry: resolved (to the tag's new digest), warned, recorded.
	if err := os.WriteFile(filepath.Join(tree, "recipes/test.lock"), []byte("version: 1\nsources: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr, m := build(ExitOK)
	if len(m.Sources) != 1 || m.Sources[0].Origin != "resolved" || m.Sources[0].Digest == digestA {
		t.Errorf("unlocked build: manifest sources %s, want the tag's new digest, origin resolved", sourcesOf(m))
	}
	if !strings.Contains(stderr, "warning: ") || !strings.Contains(stderr, "of layer tools is not locked in") {
		t.Errorf("unlocked build did not warn:\n%s", stderr)
	}
	stderr, _ = build(ExitUsage, "--locked")
	if !strings.Contains(stderr, "layers/tools.yaml:3: oci[0].image: oci "+ref+" of layer tools is not locked in") {
		t.Errorf("unlocked --locked build:\n%s", stderr)
	}
}
