package remote_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ggcr "github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/uki"
)

// machine is one builder run's own world: cache, HOME, Go build cache.
type machine struct {
	name string
	dir  string
}

func newMachine(t testing.TB, name string) machine {
	m := machine{name: name, dir: filepath.Join(t.TempDir(), name)}
	for _, d := range []string{"cache", "home", "gocache", "tmp"} {
		if err := os.MkdirAll(filepath.Join(m.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// buildRun is what one `builder build --json` said.
type buildRun struct {
	manifest *osimage.BuildManifest
	ran      map[string]bool // step -> it ran (done, not cached)
	log      string
	took     time.Duration
}

// e2e is the shared state of TestRemoteCacheE2E's subtests.
type e2e struct {
	bin, recipe string
	reg         *testutil.Registry
	repo        string
	keyDir      string // a key pair from `builder genkey`: entries are signed and trusted
	cold        *buildRun
	coldMachine machine
	steps       []string          // cacheable steps of the recipe
	keys        map[string]string // step -> key, from the cold build's plan
}

// build runs the builder on machine m: its own OSB_CACHE_DIR, HOME and
// GOCACHE; pid runs it in a PID namespace of its own.
func (e *e2e) build(t testing.TB, m machine, pid bool, flags ...string) *buildRun {
	t.Helper()
	run, err := e.tryBuild(t, m, pid, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

func (e *e2e) tryBuild(t testing.TB, m machine, pid bool, flags ...string) (*buildRun, error) {
	args := append([]string{"build", "--json", "--locked", "-o", filepath.Join(m.dir, "out"), e.recipe,
		"--cache-sign-key", filepath.Join(e.keyDir, uki.KeyFile), "--cache-sign-cert", filepath.Join(e.keyDir, uki.CertFile)}, flags...)
	var cmd *exec.Cmd
	if pid {
		cmd = exec.Command("unshare", append([]string{"--pid", "--fork", "--kill-child", e.bin}, args...)...)
	} else {
		cmd = exec.Command(e.bin, args...)
	}
	cmd.Env = append(os.Environ(), "OSB_CACHE_DIR="+filepath.Join(m.dir, "cache"), "HOME="+filepath.Join(m.dir, "home"),
		"GOCACHE="+filepath.Join(m.dir, "gocache"), "TMPDIR="+filepath.Join(m.dir, "tmp"), "OSB_CACHE_REPO=", "XDG_CACHE_HOME=",
		"OSB_CACHE_TRUST="+filepath.Join(e.keyDir, uki.CertFile))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	took := time.Since(began)
	if err != nil {
		return nil, fmt.Errorf("%s: builder %s: %v\n%s", m.name, strings.Join(args, " "), err, tail(stderr.String(), 60))
	}
	run := &buildRun{ran: map[string]bool{}, took: took}
	if err := json.Unmarshal(stdout.Bytes(), &run.manifest); err != nil {
		return nil, fmt.Errorf("%s: manifest on stdout: %v", m.name, err)
	}
	var log strings.Builder
	sc := bufio.NewScanner(&stderr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Step, State, Message string
			Cached               bool
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			log.WriteString(sc.Text() + "\n")
			continue
		}
		if ev.State == "done" {
			run.ran[ev.Step] = !ev.Cached
		}
		if ev.Message != "" {
			log.WriteString(ev.Message + "\n")
		}
	}
	run.log = log.String()
	t.Logf("%s: built in %s", m.name, took.Round(time.Second))
	for _, l := range strings.Split(run.log, "\n") {
		if strings.HasPrefix(l, "remote cache: pushed ") || strings.HasPrefix(l, "remote cache: pulled ") && strings.Contains(l, "entries") {
			t.Logf("%s: %s", m.name, l)
		}
	}
	return run, nil
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// sameArtifacts fails unless got has the cold build's artifacts, byte for
// byte (by sha256).
func (e *e2e) sameArtifacts(t *testing.T, who string, got *buildRun) {
	t.Helper()
	want := map[string]string{}
	for _, a := range e.cold.manifest.Artifacts {
		want[a.Path] = a.SHA256
	}
	if len(got.manifest.Artifacts) != len(want) {
		t.Errorf("%s: %d artifacts, the cold build made %d", who, len(got.manifest.Artifacts), len(want))
	}
	for _, a := range got.manifest.Artifacts {
		if want[a.Path] != a.SHA256 {
			t.Errorf("%s: %s is %s, the cold build's is %s", who, a.Path, a.SHA256, want[a.Path])
		}
	}
}

// TestRemoteCacheE2E: builder A builds the test recipe cold into a fresh
// cache and pushes every step to a real docker-registry (--cache-to);
// builder B (fresh cache, other HOME, empty Go build cache) builds it
// with --cache-from and runs no step, with A's artifacts byte for byte; a
// blob damaged in the registry is refused and its step runs; a registry
// that goes away mid-build leaves the build to its local cache; three
// builders in PID namespaces of their own, each with its own cache, build
// at once from the remote cache and push to a second repository at once,
// all with A's artifacts, and that repository ends with one entry per key.
// One cold build serves every subtest. The recipe is the test recipe with
// pxe as its only output: every step, fewer writers to wait for.
func TestRemoteCacheE2E(t *testing.T) {
	testutil.RequireTool(t, "mmdebstrap")
	testutil.RequireTool(t, "mksquashfs")
	testutil.RequireTool(t, testutil.RegistryBinary)
	if testing.Short() {
		t.Skip("builds the test recipe cold")
	}
	e := newE2E(t)
	reg := e.reg

	a := newMachine(t, "A")
	e.coldMachine = a
	e.cold = e.build(t, a, false, "--cache-to", e.repo)
	if !strings.Contains(e.cold.log, "remote cache: pushed ") {
		t.Errorf("A: no summary of its pushes:\n%s", e.cold.log)
	}
	e.plan(t, a)
	keys := e.remoteKeys(t, e.repo)
	for _, s := range e.steps {
		if !keys[e.keys[s]] {
			t.Errorf("A pushed no entry for step %s (key %.12s)", s, e.keys[s])
		}
	}

	t.Run("WarmRemote", func(t *testing.T) {
		b := e.build(t, newMachine(t, "B"), false, "--cache-from", e.repo)
		for _, s := range e.steps {
			if b.ran[s] {
				t.Errorf("B ran step %s: the remote cache has it", s)
			}
		}
		e.sameArtifacts(t, "B", b)
		t.Logf("cold %s, warm remote and empty local %s: %.3f of cold", e.cold.took.Round(time.Second), b.took.Round(time.Second), b.took.Seconds()/e.cold.took.Seconds())
	})

	t.Run("TamperedBlob", func(t *testing.T) {
		// The init step's entry is one file: damage its blob in the
		// registry's storage, same size, one byte flipped.
		blob := e.entryBlobs(t, e.keys["init"])[0]
		data := filepath.Join(reg.Storage(), "docker/registry/v2/blobs/sha256", blob.Hex[:2], blob.Hex, "data")
		orig, err := os.ReadFile(data)
		if err != nil {
			t.Fatal(err)
		}
		bad := append([]byte(nil), orig...)
		bad[len(bad)/2] ^= 0xff
		if err := os.WriteFile(data, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.WriteFile(data, orig, 0o644)
		c := e.build(t, newMachine(t, "C"), false, "--cache-from", e.repo)
		if !c.ran["init"] {
			t.Errorf("C did not run the init step whose blob is damaged")
		}
		if !strings.Contains(c.log, "init: refused the entry") || !strings.Contains(c.log, blob.Hex) {
			t.Errorf("C's log does not say the init entry was refused for its blob %s:\n%s", blob.Hex, c.log)
		}
		e.sameArtifacts(t, "C", c)
	})

	t.Run("RegistryGoesAway", func(t *testing.T) {
		// A proxy to the registry that dies after a third of the entries'
		// bytes: the steps pulled by then are hits, the rest run here.
		// D has the bootstrap tree already (a copy of A's entry): what
		// runs here after the registry is gone is the cheap steps, not a
		// bootstrap.
		dm := newMachine(t, "D")
		boot := e.keys["bootstrap"]
		entries := filepath.Join(dm.dir, "cache", "entries")
		if err := os.MkdirAll(entries, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-a", filepath.Join(e.coldMachine.dir, "cache", "entries", boot), entries).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, out)
		}
		rest := e.remoteBytes(t) - e.entryBytes(t, boot)
		p := startDyingProxy(t, reg.Host, rest/3)
		d := e.build(t, dm, false, "--cache-from", p+"/osb/cache")
		if d.ran["bootstrap"] {
			t.Errorf("D ran the bootstrap it had")
		}
		if !strings.Contains(d.log, "the registry does not answer") {
			t.Errorf("D: the registry went away unnoticed:\n%s", d.log)
		}
		ran := 0
		for _, s := range e.steps {
			if d.ran[s] {
				ran++
			}
		}
		if ran == 0 {
			t.Errorf("D ran no step: the proxy did not go away mid-build")
		}
		e.sameArtifacts(t, "D", d)
	})

	t.Run("PruneRemote", func(t *testing.T) {
		// An entry no plan of the recipe names (pushed from a store of
		// its own) goes; every entry the recipe's plan names stays.
		s, err := cache.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var in cache.Inputs
		in.Add("stale", "an entry of an old lock")
		if _, err := s.Fill(context.Background(), "stale", in, func(dir string) error {
			return os.WriteFile(filepath.Join(dir, "f"), []byte("old"), 0o644)
		}); err != nil {
			t.Fatal(err)
		}
		r, err := remote.Open(e.repo)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.Push(context.Background(), s, in.Key(), "test"); err != nil {
			t.Fatal(err)
		}
		before := e.remoteKeys(t, e.repo)
		out := e.pruneRemote(t, e.repo)
		after := e.remoteKeys(t, e.repo)
		if after[in.Key()] || len(after) != len(before)-1 {
			t.Errorf("prune --remote: %d entries before, %d after (stale one kept: %v):\n%s", len(before), len(after), after[in.Key()], out)
		}
		for _, st := range e.steps {
			if !after[e.keys[st]] {
				t.Errorf("prune --remote deleted step %s's entry, which the plan names", st)
			}
		}
	})

	t.Run("ThreeAtOnce", func(t *testing.T) {
		second := reg.Host + "/osb/cache-again"
		var wg sync.WaitGroup
		runs := make([]*buildRun, 3)
		machines := []machine{newMachine(t, "P1"), newMachine(t, "P2"), newMachine(t, "P3")}
		for i := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var err error
				if runs[i], err = e.tryBuild(t, machines[i], true, "--cache-from", e.repo, "--cache-to", second); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		for i, r := range runs {
			if r == nil {
				continue // its failure is reported
			}
			e.sameArtifacts(t, "P"+string(rune('1'+i)), r)
		}
		got := e.remoteKeys(t, second)
		want := e.remoteKeys(t, e.repo)
		if len(got) != len(want) {
			t.Errorf("%s has %d entries, %s %d", second, len(got), e.repo, len(want))
		}
		for k := range want {
			if !got[k] {
				t.Errorf("%s lacks %.12s", second, k)
			}
		}
	})
}

// pruneRemote runs `builder cache prune --remote` with A's cache.
func (e *e2e) pruneRemote(t *testing.T, repo string) string {
	t.Helper()
	cmd := exec.Command(e.bin, "cache", "prune", "--remote", repo, "--older-than", "1ns", e.recipe)
	cmd.Env = append(os.Environ(), "OSB_CACHE_DIR="+filepath.Join(e.coldMachine.dir, "cache"), "XDG_CACHE_HOME=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cache prune --remote: %v\n%s", err, out)
	}
	return string(out)
}

// plan reads the cacheable steps and their keys from A's plan.
func (e *e2e) plan(t testing.TB, m machine) {
	t.Helper()
	cmd := exec.Command(e.bin, "build", "--plan", "--json", "--locked", "-o", filepath.Join(m.dir, "out"), e.recipe)
	cmd.Env = append(os.Environ(), "OSB_CACHE_DIR="+filepath.Join(m.dir, "cache"), "HOME="+filepath.Join(m.dir, "home"), "XDG_CACHE_HOME=")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	var p struct {
		Steps []struct{ Step, Key, Cache string }
	}
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Steps {
		if s.Cache == "hit" {
			e.steps = append(e.steps, s.Step)
			e.keys[s.Step] = s.Key
		}
	}
	if e.keys["init"] == "" || e.keys["bootstrap"] == "" || len(e.steps) < 4 {
		t.Fatalf("plan after the cold build: steps %v, want init and bootstrap among 4 or more hits", e.steps)
	}
	sort.Strings(e.steps)
}

func (e *e2e) remoteKeys(t testing.TB, repo string) map[string]bool {
	t.Helper()
	r, err := remote.Open(repo)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := r.Keys(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// entryBlobs are the file layers of the entry tagged key.
func (e *e2e) entryBlobs(t *testing.T, key string) []v1.Hash {
	t.Helper()
	img, err := e.image(t, key)
	if err != nil {
		t.Fatal(err)
	}
	man, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var hs []v1.Hash
	for _, l := range man.Layers {
		hs = append(hs, l.Digest)
	}
	if len(hs) == 0 {
		t.Fatalf("entry %.12s has no file", key)
	}
	return hs
}

// remoteBytes is the size of every file of the cold build's entries.
func (e *e2e) remoteBytes(t *testing.T) int64 {
	var n int64
	for _, s := range e.steps {
		n += e.entryBytes(t, e.keys[s])
	}
	return n
}

// entryBytes is the size of the files of the remote entry tagged key.
func (e *e2e) entryBytes(t *testing.T, key string) int64 {
	img, err := e.image(t, key)
	if err != nil {
		t.Fatal(err)
	}
	man, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range man.Layers {
		n += l.Size
	}
	return n
}

// startDyingProxy forwards a loopback port to target until it has sent
// budget bytes back, then closes its listener and every connection: the
// registry is gone from the client's side.
func startDyingProxy(t *testing.T, target string, budget int64) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	var mu sync.Mutex
	var conns []net.Conn
	dead := make(chan struct{})
	var once sync.Once
	die := func() {
		once.Do(func() {
			close(dead)
			l.Close()
			mu.Lock()
			for _, c := range conns {
				c.Close()
			}
			mu.Unlock()
		})
	}
	t.Cleanup(die)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() { _, _ = io.Copy(up, c) }()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := up.Read(buf)
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
						if sent.Add(int64(n)) > budget {
							die()
							return
						}
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func (e *e2e) image(t *testing.T, key string) (v1.Image, error) {
	ref, err := name.ParseReference(e.repo + ":" + key)
	if err != nil {
		t.Fatal(err)
	}
	return ggcr.Image(ref)
}

// releaseBuilder builds cmd/builder as `make builder` does, carrying its
// init: no build compiles the init from the (changing) source tree, and a
// machine without a Go build cache builds like a release builder.
func releaseBuilder(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	initDir := filepath.Join(dir, ".init")
	for _, args := range [][]string{
		{"run", "./cmd/embedinit", initDir},
		{"build", "-tags", "osb_embed_init", "-overlay", filepath.Join(initDir, "overlay.json"), "-o", filepath.Join(dir, "builder"), "./cmd/builder"},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return filepath.Join(dir, "builder")
}

// newE2E starts a registry, builds the release builder and copies the
// recipe tree with the test recipe cut to the pxe output.
func newE2E(t testing.TB) *e2e {
	t.Helper()
	reg, err := testutil.StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	e := &e2e{reg: reg, repo: reg.Host + "/osb/cache", keys: map[string]string{}}
	e.bin = releaseBuilder(t)
	e.keyDir = filepath.Join(t.TempDir(), "keys")
	if out, err := exec.Command(e.bin, "genkey", e.keyDir).CombinedOutput(); err != nil {
		t.Fatalf("builder genkey: %v\n%s", err, out)
	}
	tree := t.TempDir()
	for _, d := range []string{"recipes", "units"} {
		if out, err := exec.Command("cp", "-a", filepath.Join("../..", d), tree).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v\n%s", d, err, out)
		}
	}
	e.recipe = filepath.Join(tree, "recipes/test.yaml")
	raw, err := os.ReadFile(e.recipe)
	if err != nil {
		t.Fatal(err)
	}
	pxeOnly := strings.Replace(string(raw), "outputs:\n  - pxe\n  - uki\n  - disk\n  - iso\n", "outputs:\n  - pxe\n", 1)
	if pxeOnly == string(raw) {
		t.Fatal("recipes/test.yaml: its outputs list is not pxe, uki, disk, iso any more: update this test")
	}
	if err := os.WriteFile(e.recipe, []byte(pxeOnly), 0o644); err != nil {
		t.Fatal(err)
	}

	return e
}
