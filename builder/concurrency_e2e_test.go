package builder

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/rootfs"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// concurrentBuild is one `builder build` in its own PID namespace, as in a
// container sharing the cache volume.
type concurrentBuild struct {
	cmd  *exec.Cmd
	out  string
	mu   sync.Mutex
	log  strings.Builder
	done chan error
}

func startConcurrentBuild(t *testing.T, bin, recipePath, cacheDir, out string) *concurrentBuild {
	t.Helper()
	b := &concurrentBuild{out: out, done: make(chan error, 1)}
	b.cmd = exec.Command("unshare", "-p", "-f", "--mount-proc", "--kill-child",
		bin, "build", recipePath, "--output", out, "--cache-dir", cacheDir)
	b.cmd.Env = append(os.Environ(), "OSB_SOURCE_DIR="+buildertest.RepoRoot(t))
	stderr, err := b.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	b.cmd.Stdout = b.cmd.Stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			b.mu.Lock()
			b.log.WriteString(sc.Text() + "\n")
			b.mu.Unlock()
		}
		b.done <- b.cmd.Wait()
	}()
	return b
}

func (b *concurrentBuild) output() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

// stepLine reports whether the build printed a progress line for step
// containing what (e.g. "start", "built in", "cached").
func (b *concurrentBuild) stepLine(step, what string) bool {
	for _, l := range strings.Split(b.output(), "\n") {
		_, rest, ok := strings.Cut(l, "] ") // after the "[  12.3s]" stamp
		f := strings.Fields(rest)
		if ok && len(f) >= 2 && strings.TrimSuffix(f[0], ":") == step && strings.Contains(rest, what) {
			return true
		}
	}
	return false
}

func (b *concurrentBuild) waiting(step string) bool {
	return strings.Contains(b.output(), "cache: "+step+": waiting for another build")
}

func (b *concurrentBuild) wait(t *testing.T, name string) {
	t.Helper()
	select {
	case err := <-b.done:
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, b.output())
		}
	case <-time.After(20 * time.Minute):
		t.Fatalf("%s did not finish\n%s", name, b.output())
	}
}

func artifactDigests(t *testing.T, out string) []osimage.Artifact {
	t.Helper()
	var m osimage.BuildManifest
	b, err := os.ReadFile(filepath.Join(out, osimage.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m.Artifacts
}

// seedBootstrap copies the test recipe's bootstrap entry (its base layer)
// from the shared cache into the fresh one, so the builds below race on the
// later steps (assemble, initrd) instead of all waiting for mmdebstrap.
func seedBootstrap(t *testing.T, recipePath, from, to string) {
	t.Helper()
	r, err := recipe.Load(recipePath)
	if err != nil {
		t.Fatal(err)
	}
	boot := rootfs.NewBootstrap(r, rootfs.PackageSet(r), DefaultSourceDateEpoch, "", "", nil, nil)
	in, err := boot.Inputs()
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(from, "entries", in.Key())
	if _, err := os.Stat(filepath.Join(src, step.PackagesList)); err != nil {
		t.Logf("no bootstrap entry to seed from in %s; the builds bootstrap", from)
		return
	}
	store, err := cache.Open(to)
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Fill(context.Background(), boot.Name(), in, func(dir string) error {
		for _, f := range []string{step.LayerImage, step.PackagesList} {
			// Hard links: the seal records what the files are now.
			if err := os.Link(filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
				if err := command.Run(context.Background(), "cp", filepath.Join(src, f), filepath.Join(dir, f)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentBuildsShareCache runs builds of the test recipe at the same
// time, each in its own PID namespace, on one cache: all succeed with the
// same artifacts and each step is computed once. Then it kills (-9) the
// build filling a step while others wait for it: they take over, and the
// next build succeeds.
func TestConcurrentBuildsShareCache(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs", "unshare")
	if testing.Short() {
		t.Skip("builds images")
	}
	if os.Geteuid() != 0 {
		t.Skip("PID namespaces need root")
	}
	bin := filepath.Join(t.TempDir(), "builder")
	if err := command.Run(context.Background(), "go", "build", "-o", bin, "../cmd/builder"); err != nil {
		t.Fatal(err)
	}
	tree := buildertest.CopyRecipeTree(t)
	recipePath := filepath.Join(tree, "recipes/test.yaml")
	cacheDir := t.TempDir()
	seedBootstrap(t, recipePath, cache.DefaultDir(), cacheDir)

	// Round 1: three builds at once.
	const n = 3
	var builds []*concurrentBuild
	for i := 0; i < n; i++ {
		builds = append(builds, startConcurrentBuild(t, bin, recipePath, cacheDir, filepath.Join(tree, fmt.Sprintf("out%d", i))))
	}
	for i, b := range builds {
		b.wait(t, fmt.Sprintf("build %d", i))
	}
	want := artifactDigests(t, builds[0].out)
	for i, b := range builds {
		if got := artifactDigests(t, b.out); !reflect.DeepEqual(got, want) {
			t.Errorf("build %d made other artifacts than build 0:\n%v\n%v", i, got, want)
		}
	}
	for _, step := range []string{"assemble", "initrd-noroot"} {
		built := 0
		for _, b := range builds {
			if b.stepLine(step, "built in") {
				built++
			}
		}
		if built != 1 {
			t.Errorf("%s was computed by %d builds, want 1", step, built)
		}
	}

	// Round 2: on an empty cache, kill -9 the build filling bootstrap (the
	// long step) while the others wait for it.
	entries, _ := filepath.Glob(filepath.Join(cacheDir, "entries", "*"))
	for _, e := range entries {
		if err := os.RemoveAll(e); err != nil {
			t.Fatal(err)
		}
	}
	victim := startConcurrentBuild(t, bin, recipePath, cacheDir, filepath.Join(tree, "victim"))
	defer victim.cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Minute)
	for !victim.stepLine("bootstrap", "start") {
		if time.Now().After(deadline) {
			t.Fatalf("the first build never started bootstrap\n%s", victim.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	builds = builds[:0]
	for i := 0; i < n-1; i++ {
		builds = append(builds, startConcurrentBuild(t, bin, recipePath, cacheDir, filepath.Join(tree, fmt.Sprintf("after%d", i))))
	}
	for {
		all := true
		for _, b := range builds {
			all = all && b.waiting("bootstrap")
		}
		if all {
			break
		}
		if victim.stepLine("bootstrap", "built in") || time.Now().After(deadline) {
			t.Fatalf("could not catch the filler mid-step\nfiller:\n%s\nothers:\n%s", victim.output(), builds[0].output())
		}
		time.Sleep(50 * time.Millisecond)
	}
	killedAt := time.Now()
	victim.cmd.Process.Kill()
	<-victim.done
	took := 0
	for i, b := range builds {
		b.wait(t, fmt.Sprintf("build %d after the kill", i))
		if got := artifactDigests(t, b.out); !reflect.DeepEqual(got, want) {
			t.Errorf("build %d after the kill made other artifacts:\n%v\n%v", i, got, want)
		}
		if b.stepLine("bootstrap", "built in") {
			took++
		}
	}
	if took != 1 {
		t.Errorf("after the kill, %d waiting builds computed bootstrap, want 1", took)
	}
	t.Logf("killed the filler mid-bootstrap; the waiters finished %.0fs later", time.Since(killedAt).Seconds())
	if _, err := os.Stat(filepath.Join(tree, "victim", osimage.ManifestFile)); err == nil {
		t.Error("the killed build wrote an output")
	}
	next := startConcurrentBuild(t, bin, recipePath, cacheDir, filepath.Join(tree, "next"))
	next.wait(t, "the build after")
	for _, step := range []string{"bootstrap", "assemble", "initrd-noroot"} {
		if !next.stepLine(step, "cached") {
			t.Errorf("the build after: %s not cached\n%s", step, next.output())
		}
	}
	if got := artifactDigests(t, next.out); !reflect.DeepEqual(got, want) {
		t.Errorf("the build after made other artifacts:\n%v\n%v", got, want)
	}
	if left, _ := os.ReadDir(filepath.Join(cacheDir, "tmp")); len(left) != 0 {
		var names []string
		for _, d := range left {
			names = append(names, d.Name())
		}
		t.Errorf("the killed build's leftovers were not swept: %v", names)
	}
}
