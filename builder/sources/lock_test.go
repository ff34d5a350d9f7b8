package sources

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// toolImage is a one-layer linux/amd64 image whose /usr/local/bin/tool
// holds body: images with different bodies tell which one a step pulled.
func toolImage(t *testing.T, body string) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, tarLayer(t,
		tarEntry{name: "usr/local/bin/", typ: tar.TypeDir},
		tarEntry{name: "usr/local/bin/tool", typ: tar.TypeReg, body: body},
	))
	if err != nil {
		t.Fatal(err)
	}
	return testutil.LinuxImage(t, img, "amd64", nil)
}

// pushTool pushes toolImage(body) as ref and returns its digest.
func pushTool(t *testing.T, ref, body string) string {
	t.Helper()
	return testutil.PushImage(t, ref, toolImage(t, body))
}

// lockTree writes a recipe whose one layer takes the tool from image and
// returns the recipe's path.
func lockTree(t *testing.T, image string) string {
	t.Helper()
	dir := t.TempDir()
	writeLockLayer(t, dir, image)
	if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte("name: r\nversion: \"1\"\nbase: {distribution: debian}\nunitsDir: .\nlayers: [layer.yaml]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "recipe.yaml")
}

func writeLockLayer(t *testing.T, dir, image string) {
	t.Helper()
	layer := "name: tools\noci:\n  - image: " + image + "\n    paths: {/usr/local/bin/tool: /usr/bin/tool}\n"
	if err := os.WriteFile(filepath.Join(dir, "layer.yaml"), []byte(layer), 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadRecipe(t *testing.T, path string) *recipe.Recipe {
	t.Helper()
	r, err := recipe.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// lockRecipe runs UpdateLock on the recipe at path against its current
// lock and writes the result.
func lockRecipe(t *testing.T, path string, opts LockOptions) []LockChange {
	t.Helper()
	r := loadRecipe(t, path)
	old, err := recipe.LoadLock(recipe.LockPath(path))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err != nil {
		old = nil
	}
	next, changes, err := UpdateLock(context.Background(), r, old, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := next.Write(); err != nil {
		t.Fatal(err)
	}
	return changes
}

// pinAndPull pins the recipe's sources as a build does and pulls the
// tool through the oci step: what it returns is what the build would
// ship.
func pinAndPull(t *testing.T, path string, locked bool) ([]osimage.Source, string, []string) {
	t.Helper()
	r := loadRecipe(t, path)
	var warnings []string
	r, srcs, err := PinSources(context.Background(), r, locked, func(format string, args ...any) {
		warnings = append(warnings, fmt.Sprintf(format, args...))
	})
	if err != nil {
		t.Fatal(err)
	}
	step := &OCI{src: r.Resolved[0].OCI[0], arch: "amd64", storeDir: t.TempDir()}
	out := t.TempDir()
	if err := step.Run(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, fileName("/usr/local/bin/tool")))
	if err != nil {
		t.Fatal(err)
	}
	return srcs, string(b), warnings
}

// TestLockPinsTag follows a tag through its life against a real registry:
// locked to image A; the tag moves to B and builds keep A, with and
// without --locked; `lock` without --update keeps A; `lock --update`
// moves to B.
func TestLockPinsTag(t *testing.T) {
	reg := testutil.NewRegistry(t)
	ref := reg + "/osb/tool:t"
	digestA := pushTool(t, ref, "A\n")
	path := lockTree(t, ref)

	changes := lockRecipe(t, path, LockOptions{})
	if len(changes) != 1 || changes[0].What != "added" || changes[0].Source.Digest != digestA || changes[0].Source.Ref != ref {
		t.Fatalf("first lock: %+v", changes)
	}
	digestB := pushTool(t, ref, "B\n")

	if changes := lockRecipe(t, path, LockOptions{}); len(changes) != 0 {
		t.Errorf("lock without --update changed %+v; it keeps existing entries", changes)
	}
	for _, locked := range []bool{false, true} {
		srcs, tool, warnings := pinAndPull(t, path, locked)
		want := []osimage.Source{{Layer: "tools", Kind: "oci", Ref: ref, Digest: digestA, Origin: OriginLock}}
		if fmt.Sprint(srcs) != fmt.Sprint(want) {
			t.Errorf("locked=%v: sources %+v, want %+v", locked, srcs, want)
		}
		if tool != "A\n" {
			t.Errorf("locked=%v: the build pulled %q, want image A's tool (the tag now names B)", locked, tool)
		}
		if len(warnings) > 0 {
			t.Errorf("locked=%v: warnings for a locked source: %q", locked, warnings)
		}
	}

	changes = lockRecipe(t, path, LockOptions{Update: true, Layers: []string{"tools"}})
	if len(changes) != 1 || changes[0].What != "updated" || changes[0].OldDigest != digestA || changes[0].Source.Digest != digestB {
		t.Fatalf("lock --update tools: %+v", changes)
	}
	if _, tool, _ := pinAndPull(t, path, true); tool != "B\n" {
		t.Errorf("after lock --update the build pulled %q, want B's", tool)
	}
}

// TestLockedRefusesDrift: with --locked a build refuses a source the lock
// lacks, a stale entry and a recipe digest the lock contradicts, each
// named with its file and line; without --locked it resolves the unlocked
// source, warns and records where the digest came from.
func TestLockedRefusesDrift(t *testing.T) {
	reg := testutil.NewRegistry(t)
	digestA := pushTool(t, reg+"/osb/tool:t", "A\n")
	digestB := pushTool(t, reg+"/osb/tool:t2", "B\n")
	path := lockTree(t, reg+"/osb/tool:t")
	lockRecipe(t, path, LockOptions{})
	lockFile := recipe.DisplayPath(recipe.LockPath(path))
	layerFile := recipe.DisplayPath(filepath.Join(filepath.Dir(path), "layer.yaml"))

	// The layer moves to another tag; the lock still has the old one.
	writeLockLayer(t, filepath.Dir(path), reg+"/osb/tool:t2")
	_, _, err := PinSources(context.Background(), loadRecipe(t, path), true, t.Logf)
	var le *LockError
	if !errors.As(err, &le) {
		t.Fatalf("--locked with a stale lock: err = %v, want a *LockError", err)
	}
	for _, want := range []string{
		layerFile + ":3: oci[0].image: oci " + reg + "/osb/tool:t2 of layer tools is not locked in " + lockFile,
		lockFile + ":5: sources[0]: stale: layer tools has no oci source " + reg + "/osb/tool:t; run `builder lock " + recipe.DisplayPath(path) + "`",
		"--locked builds only what the lock pins",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}

	// Without --locked: resolved now, warned about, recorded as resolved.
	srcs, tool, warnings := pinAndPull(t, path, false)
	if len(srcs) != 1 || srcs[0].Digest != digestB || srcs[0].Origin != OriginResolved || tool != "B\n" {
		t.Errorf("unlocked source: %+v, tool %q", srcs, tool)
	}
	joined := strings.Join(warnings, "\n")
	for _, want := range []string{"stale: layer tools", layerFile + ":3: oci " + reg + "/osb/tool:t2 of layer tools is not locked in " + lockFile + "; resolved to " + digestB} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q:\n%s", want, joined)
		}
	}

	// A digest in the layer wins, and must agree with the lock.
	writeLockLayer(t, filepath.Dir(path), reg+"/osb/tool:t@"+digestB)
	_, _, err = PinSources(context.Background(), loadRecipe(t, path), true, t.Logf)
	if want := layerFile + ":3: oci[0].image: oci " + reg + "/osb/tool:t pins " + digestB + ", but the lock " + lockFile + " has " + digestA; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("recipe digest against the lock: err = %v, want %q", err, want)
	}
	srcs, tool, _ = pinAndPull(t, path, false)
	if srcs[0].Origin != OriginRecipe || srcs[0].Digest != digestB || tool != "B\n" {
		t.Errorf("recipe digest without --locked: %+v, tool %q", srcs, tool)
	}
	// `builder lock` takes the layer's digest over its entry.
	if changes := lockRecipe(t, path, LockOptions{}); len(changes) != 1 || changes[0].What != "updated" || changes[0].Source.Digest != digestB {
		t.Errorf("lock after the layer pinned a digest: %+v", changes)
	}
	if _, _, err := PinSources(context.Background(), loadRecipe(t, path), true, t.Logf); err != nil {
		t.Errorf("--locked after lock: %v", err)
	}
}

// TestLockThroughMirror: a tag on a registry this machine cannot reach
// resolves through OSB_REGISTRY_MIRRORS, as pulls do, and the lock names
// the tag as the recipe does.
func TestLockThroughMirror(t *testing.T) {
	reg := testutil.NewRegistry(t)
	digest := pushTool(t, reg+"/ironcore-dev/tool:v1", "mirrored\n")
	t.Setenv(MirrorsEnv, "ghcr.io="+reg)
	path := lockTree(t, "ghcr.io/ironcore-dev/tool:v1")
	changes := lockRecipe(t, path, LockOptions{})
	if len(changes) != 1 || changes[0].Source.Ref != "ghcr.io/ironcore-dev/tool:v1" || changes[0].Source.Digest != digest {
		t.Fatalf("lock through a mirror: %+v", changes)
	}
	if _, tool, _ := pinAndPull(t, path, true); tool != "mirrored\n" {
		t.Errorf("pulled %q", tool)
	}
}

// TestLockUnreachableAndExcluded: `lock` fails for a source it cannot
// resolve, naming the layer file and line and the way around; with the
// layer excluded it writes a lock without it, and keeps an entry the
// lock already had for it.
func TestLockUnreachableAndExcluded(t *testing.T) {
	t.Setenv(MirrorsEnv, "ghcr.io="+buildertest.ClosedPort(t))
	path := lockTree(t, "ghcr.io/ironcore-dev/dpservice:v0.3.16")
	r := loadRecipe(t, path)
	_, _, err := UpdateLock(context.Background(), r, nil, LockOptions{})
	layerFile := recipe.DisplayPath(filepath.Join(filepath.Dir(path), "layer.yaml"))
	for _, want := range []string{layerFile + ":3: layer tools: oci source ghcr.io/ironcore-dev/dpservice:v0.3.16 (via mirror ", "cannot be fetched", "--exclude-layer tools"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to contain %q", err, want)
		}
	}

	if err := r.ExcludeLayers("tools"); err != nil {
		t.Fatal(err)
	}
	next, changes, err := UpdateLock(context.Background(), r, nil, LockOptions{Update: true})
	if err != nil || len(next.Sources) != 0 || len(changes) != 0 {
		t.Errorf("excluded layer: %+v %+v %v", next, changes, err)
	}
	old := &recipe.Lock{Version: recipe.LockVersion, Sources: []recipe.LockedSource{{Layer: "tools", Kind: recipe.SourceOCI, Ref: "ghcr.io/ironcore-dev/dpservice:v0.3.16", Digest: "sha256:" + strings.Repeat("c", 64)}}}
	next, changes, err = UpdateLock(context.Background(), r, old, LockOptions{Update: true})
	if err != nil || len(next.Sources) != 1 || next.Sources[0] != old.Sources[0] || len(changes) != 0 {
		t.Errorf("excluded layer with an entry: %+v %+v %v", next, changes, err)
	}
	// And the build of the recipe without it is fine with --locked.
	if err := next.Write(); err != nil {
		t.Fatal(err)
	}
	if _, srcs, err := PinSources(context.Background(), r, true, t.Logf); err != nil || len(srcs) != 0 {
		t.Errorf("--locked without the excluded layer: %v, %v", srcs, err)
	}
}

// TestLockGoModule: a Go module named without sum is locked to the go.sum
// hash the module proxy serves (go mod download), and a build pins the
// module's sum from the lock; a new version in the layer is not locked.
func TestLockGoModule(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches a module")
	}
	const module, version = "golang.org/x/example/hello", "v0.0.0-20250915201037-7f05d217867b"
	const sum = "h1:+gZE2jOdiscYByu0606Uw8Ldir2Cecd39Vq/3IEasRA="
	// The checksum database is out of reach here; the proxy's hash is what
	// the test pins, so the result is the same where it is reachable.
	t.Setenv("GONOSUMDB", module)
	dir := t.TempDir()
	layer := func(v string) {
		if err := os.WriteFile(filepath.Join(dir, "layer.yaml"), []byte("name: hello\ngo:\n  - module: "+module+"\n    version: "+v+"\n    binary: /usr/bin/hello\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	layer(version)
	path := filepath.Join(dir, "recipe.yaml")
	if err := os.WriteFile(path, []byte("name: r\nversion: \"1\"\nbase: {distribution: debian}\nunitsDir: .\nlayers: [layer.yaml]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changes := lockRecipe(t, path, LockOptions{})
	if len(changes) != 1 || changes[0].Source != (recipe.LockedSource{Layer: "hello", Kind: recipe.SourceGo, Ref: module + "@" + version, Digest: sum}) {
		t.Fatalf("lock: %+v", changes)
	}
	r := loadRecipe(t, path)
	pinned, srcs, err := PinSources(context.Background(), r, true, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if pinned.Resolved[0].Go[0].Sum != sum || len(srcs) != 1 || srcs[0].Origin != OriginLock {
		t.Errorf("pinned sum %q, sources %+v", pinned.Resolved[0].Go[0].Sum, srcs)
	}
	if r.Resolved[0].Go[0].Sum != "" {
		t.Errorf("PinSources changed the recipe it was given: sum %q", r.Resolved[0].Go[0].Sum)
	}
	// A second build of the same recipe value still takes it from the lock.
	if _, srcs, err := PinSources(context.Background(), r, true, t.Logf); err != nil || len(srcs) != 1 || srcs[0].Origin != OriginLock {
		t.Errorf("second PinSources: %+v, %v", srcs, err)
	}

	layer("v0.0.0-20250101000000-000000000000")
	_, _, err = PinSources(context.Background(), loadRecipe(t, path), true, t.Logf)
	if want := "layer.yaml:3: go[0]: go " + module + "@v0.0.0-20250101000000-000000000000 of layer hello is not locked in "; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("new version with --locked: %v, want %q", err, want)
	}
}
