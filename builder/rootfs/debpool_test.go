package rootfs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/recipe"
)

func writeDeb(t *testing.T, dir, name, content string) {
	t.Helper()
	buildertest.Must(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	buildertest.Must(t, err)
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	sort.Strings(names)
	return names
}

func debsOf(t *testing.T, dir string) []string {
	var debs []string
	for _, n := range dirNames(t, dir) {
		_, deb, ok := poolName(n)
		if !ok {
			t.Fatalf("pool file %q is not SHA256_NAME.deb", n)
		}
		debs = append(debs, deb)
	}
	return debs
}

// TestDebPool: published .debs are staged under apt's names; a pool file
// whose contents no longer match its name (same size, same mtime) is
// dropped, not staged; a new version supersedes the old; prune empties it.
func TestDebPool(t *testing.T) {
	cacheDir, work := t.TempDir(), t.TempDir()
	p := newDebPool(cacheDir, "http://deb.example/debian", "bookworm")
	if q := newDebPool(cacheDir, "http://other.example/debian", "bookworm"); q.dir == p.dir {
		t.Fatal("two mirrors share a pool directory")
	}
	var logged []string
	logf := func(f string, a ...any) { logged = append(logged, f) }

	fresh := filepath.Join(work, "fresh")
	buildertest.Must(t, os.MkdirAll(fresh, 0o755))
	writeDeb(t, fresh, "foo_1.0-1_amd64.deb", "foo one")
	writeDeb(t, fresh, "libbar2_1%3a2.0_all.deb", "bar")
	writeDeb(t, fresh, "partial", "not a deb")
	if n, err := p.publish(fresh); err != nil || n != 2 {
		t.Fatalf("publish = %d, %v; want 2", n, err)
	}
	got := debsOf(t, p.dir)
	sort.Strings(got)
	if want := "foo_1.0-1_amd64.deb libbar2_1%3a2.0_all.deb"; strings.Join(got, " ") != want {
		t.Fatalf("pool holds %v, want %s", got, want)
	}

	stage := filepath.Join(work, "stage1")
	buildertest.Must(t, os.MkdirAll(stage, 0o755))
	if n, err := p.stage(stage, logf); err != nil || n != 2 {
		t.Fatalf("stage = %d, %v; want 2", n, err)
	}
	if b, _ := os.ReadFile(filepath.Join(stage, "foo_1.0-1_amd64.deb")); string(b) != "foo one" {
		t.Fatalf("staged foo = %q", b)
	}

	// Bit rot: same size, mtime put back. Only the hash can tell.
	var fooPool string
	for _, n := range dirNames(t, p.dir) {
		if strings.HasSuffix(n, "_foo_1.0-1_amd64.deb") {
			fooPool = filepath.Join(p.dir, n)
		}
	}
	fi, err := os.Stat(fooPool)
	buildertest.Must(t, err)
	buildertest.Must(t, os.WriteFile(fooPool, []byte("foo 0ne"), 0o644))
	buildertest.Must(t, os.Chtimes(fooPool, fi.ModTime(), fi.ModTime()))
	stage2 := filepath.Join(work, "stage2")
	buildertest.Must(t, os.MkdirAll(stage2, 0o755))
	if n, err := p.stage(stage2, logf); err != nil || n != 1 {
		t.Fatalf("stage with a damaged file = %d, %v; want 1", n, err)
	}
	if _, err := os.Lstat(filepath.Join(stage2, "foo_1.0-1_amd64.deb")); err == nil {
		t.Fatal("a damaged .deb was staged")
	}
	if _, err := os.Lstat(fooPool); err == nil {
		t.Fatal("the damaged .deb stayed in the pool")
	}
	if len(logged) != 1 {
		t.Fatalf("logged %q, want one line about the damaged file", logged)
	}

	// A new version supersedes the old one; staged links stay intact.
	buildertest.Must(t, os.RemoveAll(fresh))
	buildertest.Must(t, os.MkdirAll(fresh, 0o755))
	writeDeb(t, fresh, "libbar2_1%3a2.1_all.deb", "bar two")
	if _, err := p.publish(fresh); err != nil {
		t.Fatal(err)
	}
	if got := debsOf(t, p.dir); len(got) != 1 || got[0] != "libbar2_1%3a2.1_all.deb" {
		t.Fatalf("pool holds %v, want the new libbar2 only", got)
	}
	if b, _ := os.ReadFile(filepath.Join(stage2, "libbar2_1%3a2.0_all.deb")); string(b) != "bar" {
		t.Fatalf("a staged link lost its contents: %q", b)
	}
	// Nothing is left behind in the staging area by publish.
	if n := dirNames(t, fresh); len(n) != 0 {
		t.Fatalf("fresh still holds %v", n)
	}

	if freed, err := PruneDebs(cacheDir, time.Hour); err != nil || freed != 0 {
		t.Fatalf("prune --older-than 1h = %d, %v; want nothing (just used)", freed, err)
	}
	if freed, err := PruneDebs(cacheDir, 0); err != nil || freed != int64(len("bar two")) {
		t.Fatalf("prune = %d, %v; want %d", freed, err, len("bar two"))
	}
	if n := dirNames(t, DebPoolDir(cacheDir)); len(n) != 0 {
		t.Fatalf("pool after prune: %v", n)
	}
}

// TestDebHooks runs the in and out hooks as mmdebstrap would (sh -c HOOK
// exec ROOT): staged files appear in the tree's archives without changing
// the directory's mode; the out hook picks exactly the .debs that were not
// staged.
func TestDebHooks(t *testing.T) {
	root, stage, fresh := t.TempDir(), t.TempDir(), t.TempDir()
	archives := filepath.Join(root, "var/cache/apt/archives")
	buildertest.Must(t, os.MkdirAll(filepath.Join(archives, "partial"), 0o755))
	writeDeb(t, stage, "a_1_amd64.deb", "a")
	writeDeb(t, stage, "b_1_all.deb", "b")
	for _, hook := range []string{debsInHook(stage)} {
		if out, err := exec.Command("sh", "-c", hook, "exec", root).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", hook, err, out)
		}
	}
	if fi, err := os.Stat(archives); err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("archives: %v, %v; want mode 0755 kept", fi.Mode(), err)
	}
	if got := dirNames(t, archives); strings.Join(got, " ") != "a_1_amd64.deb b_1_all.deb partial" {
		t.Fatalf("archives = %v", got)
	}
	// apt replaced b (a size mismatch would) and downloaded c.
	buildertest.Must(t, os.Remove(filepath.Join(archives, "b_1_all.deb")))
	writeDeb(t, archives, "b_1_all.deb", "b, downloaded")
	writeDeb(t, archives, "c_2_amd64.deb", "c")
	if out, err := exec.Command("sh", "-c", debsOutHook(stage, fresh), "exec", root).CombinedOutput(); err != nil {
		t.Fatalf("out hook: %v\n%s", err, out)
	}
	if got := dirNames(t, fresh); strings.Join(got, " ") != "b_1_all.deb c_2_amd64.deb" {
		t.Fatalf("fresh = %v, want the two downloaded files", got)
	}
	if b, _ := os.ReadFile(filepath.Join(stage, "b_1_all.deb")); string(b) != "b" {
		t.Fatalf("the staged file was written through: %q", b)
	}
}

// debCounter is a mirror on 127.0.0.1 that forwards to the real one and
// counts the .debs fetched through it.
type debCounter struct {
	mu   sync.Mutex
	debs []string
	url  string
}

func newDebCounter(t *testing.T, upstream string) *debCounter {
	t.Helper()
	u, err := url.Parse(upstream)
	buildertest.Must(t, err)
	u.Path = "" // the mirror's path stays in the requests
	c := &debCounter{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	director := proxy.Director
	proxy.Director = func(r *http.Request) {
		director(r)
		r.Host = u.Host
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".deb") {
			c.mu.Lock()
			c.debs = append(c.debs, path.Base(r.URL.Path))
			c.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c.url = srv.URL
	return c
}

func (c *debCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := c.debs
	c.debs = nil
	return d
}

// imageDebs lists the .debs a base layer image holds (there must be none),
// as Debian's unsquashfs reads the image.
func imageDebs(t *testing.T, img string) (debs []string, entries int) {
	out, err := exec.Command("unsquashfs", "-l", "-d", "", img).Output()
	buildertest.Must(t, err)
	for _, p := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(p, "/") {
			continue // unsquashfs's own lines
		}
		entries++
		if strings.HasSuffix(p, ".deb") {
			debs = append(debs, p)
		}
	}
	return debs, entries
}

// TestBootstrapReusesDebs bootstraps twice through a counting mirror, the
// second time under another cache key (another SOURCE_DATE_EPOCH) and with
// one pool file damaged in place (same size, same mtime): the second
// bootstrap fetches exactly that one .deb, and neither tree carries a .deb.
func TestBootstrapReusesDebs(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap")
	if testing.Short() {
		t.Skip("bootstraps twice")
	}
	mirror := newDebCounter(t, recipe.DefaultMirror)
	r := &recipe.Recipe{Name: "debpool", Base: recipe.Base{
		Distribution: "debian", Release: "bookworm", Architecture: "amd64",
		Mirror: strings.Replace(recipe.DefaultMirror, "http://deb.debian.org", mirror.url, 1), Components: []string{"main"},
	}}
	cacheDir := t.TempDir()
	pool := newDebPool(cacheDir, r.Base.Mirror, r.Base.Release)
	var logged []string
	boot := func(epoch int64) (string, string) {
		s := &bootstrapStep{r: r, epoch: epoch, debs: pool, work: t.TempDir(),
			logf: func(f string, a ...any) { logged = append(logged, f) }}
		in, err := s.Inputs()
		buildertest.Must(t, err)
		out := t.TempDir()
		if err := s.Run(context.Background(), out); err != nil {
			t.Fatal(err)
		}
		return out, in.Key()
	}
	out1, key1 := boot(buildertest.Epoch)
	first := mirror.take()
	if len(first) < 20 {
		t.Fatalf("first bootstrap fetched %d .debs, want the whole essential set", len(first))
	}
	pooled := dirNames(t, pool.dir)
	if len(pooled) != len(first) {
		t.Fatalf("pool holds %d .debs, the bootstrap fetched %d", len(pooled), len(first))
	}
	// Damage one pool file: the hash must catch it, not size or mtime.
	var victim, victimDeb string
	for _, n := range pooled {
		if _, deb, _ := poolName(n); strings.HasPrefix(deb, "hostname_") || victim == "" {
			victim, victimDeb = filepath.Join(pool.dir, n), deb
		}
	}
	fi, err := os.Stat(victim)
	buildertest.Must(t, err)
	b, err := os.ReadFile(victim)
	buildertest.Must(t, err)
	b[len(b)/2] ^= 0xff
	buildertest.Must(t, os.WriteFile(victim, b, 0o644))
	buildertest.Must(t, os.Chtimes(victim, fi.ModTime(), fi.ModTime()))

	out2, key2 := boot(buildertest.Epoch + 1)
	if key1 == key2 {
		t.Fatal("the two bootstraps share a cache key")
	}
	second := mirror.take()
	// The mirror's file name has no epoch; the package name is enough.
	if len(second) != 1 || !strings.HasPrefix(victimDeb, strings.SplitN(second[0], "_", 2)[0]+"_") {
		t.Fatalf("second bootstrap fetched %v, want only the damaged %s", second, victimDeb)
	}
	if len(logged) != 1 {
		t.Errorf("logged %q, want one line about the damaged .deb", logged)
	}
	if got := dirNames(t, pool.dir); len(got) != len(pooled) {
		t.Errorf("pool holds %d .debs after the second bootstrap, want %d", len(got), len(pooled))
	}
	for _, out := range []string{out1, out2} {
		debs, n := imageDebs(t, filepath.Join(out, step.LayerImage))
		if len(debs) != 0 {
			t.Errorf("%s carries .debs: %v", out, debs)
		}
		if n < 1000 {
			t.Errorf("%s holds %d entries: not a tree", out, n)
		}
	}
	p1, _ := os.ReadFile(filepath.Join(out1, step.PackagesList))
	p2, _ := os.ReadFile(filepath.Join(out2, step.PackagesList))
	if string(p1) != string(p2) || len(p1) == 0 {
		t.Errorf("package lists differ:\n%s\n---\n%s", p1, p2)
	}
}

// TestAptTrustsCachedDebBySize is why the pool hashes its files: apt takes
// a .deb that sits in /var/cache/apt/archives with the right name and size
// without checking it against the signed index. A damaged copy of hello is
// put there; apt does not fetch hello, and the damage reaches dpkg-deb.
func TestAptTrustsCachedDebBySize(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap")
	if testing.Short() {
		t.Skip("runs mmdebstrap")
	}
	mirror := newDebCounter(t, recipe.DefaultMirror)
	m := strings.Replace(recipe.DefaultMirror, "http://deb.debian.org", mirror.url, 1)
	grab := t.TempDir()
	extract := func(extra ...string) ([]byte, error) {
		args := append([]string{"--variant=extract", "--mode=root", "--include=hello", "--skip=download/empty", "--skip=essential/unlink"}, extra...)
		args = append(args, "bookworm", filepath.Join(t.TempDir(), "root.tar"), m)
		return exec.Command("mmdebstrap", args...).CombinedOutput()
	}
	out, err := extract("--extract-hook=cp \"$1\"/var/cache/apt/archives/hello_*.deb " + shellQuote(grab) + "/")
	if err != nil {
		t.Fatalf("mmdebstrap: %v\n%s", err, command.Tail(string(out), 20))
	}
	names := dirNames(t, grab)
	if len(names) != 1 || !contains(mirror.take(), names[0]) {
		t.Fatalf("grabbed %v", names)
	}
	deb := filepath.Join(grab, names[0])
	b, err := os.ReadFile(deb)
	buildertest.Must(t, err)
	for i := len(b) / 2; i < len(b)/2+64; i++ { // inside data.tar
		b[i] ^= 0xff
	}
	buildertest.Must(t, os.WriteFile(deb, b, 0o644))
	out, err = extract("--setup-hook=mkdir -p \"$1\"/var/cache/apt/archives && cp " + shellQuote(deb) + " \"$1\"/var/cache/apt/archives/")
	if fetched := mirror.take(); contains(fetched, names[0]) {
		t.Fatalf("apt fetched %s again: it checked the cached file (%v); the pool's own hash check may be redundant", names[0], fetched)
	}
	if err == nil {
		t.Logf("mmdebstrap extracted the damaged .deb without complaint:\n%s", command.Tail(string(out), 5))
	} else {
		t.Logf("the damage surfaced only in dpkg-deb: %v\n%s", err, command.Tail(string(out), 5))
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestDebPoolConcurrent: builds publishing the same .debs and staging from
// the pool at once never see a partial or mismatched file.
func TestDebPoolConcurrent(t *testing.T) {
	cacheDir, work := t.TempDir(), t.TempDir()
	p := newDebPool(cacheDir, "http://deb.example/debian", "bookworm")
	content := func(i int) string { return strings.Repeat(fmt.Sprintf("package %d ", i), 5000) }
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for round := 0; round < 5; round++ {
				dir := filepath.Join(work, fmt.Sprintf("g%d-r%d", g, round))
				if err := os.MkdirAll(dir, 0o755); err != nil {
					errs <- err
					return
				}
				if g%2 == 0 {
					for i := 0; i < 20; i++ {
						if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("pkg%d_1.0_amd64.deb", i)), []byte(content(i)), 0o644); err != nil {
							errs <- err
							return
						}
					}
					if _, err := p.publish(dir); err != nil {
						errs <- err
					}
					continue
				}
				if _, err := p.stage(dir, func(f string, a ...any) { errs <- fmt.Errorf(f, a...) }); err != nil {
					errs <- err
				}
				des, _ := os.ReadDir(dir)
				for _, de := range des {
					var i int
					fmt.Sscanf(de.Name(), "pkg%d_", &i)
					if b, _ := os.ReadFile(filepath.Join(dir, de.Name())); string(b) != content(i) {
						errs <- fmt.Errorf("staged %s is not whole", de.Name())
					}
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := dirNames(t, p.dir); len(got) != 20 {
		t.Errorf("pool holds %d files, want 20", len(got))
	}
}
