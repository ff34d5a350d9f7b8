package builder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/filehash"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

func loadTestRecipe(t testing.TB) *recipe.Recipe {
	t.Helper()
	r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(t), "recipes/test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var hexKey = regexp.MustCompile(`\b[0-9a-f]{12,64}\b`)

// TestPlanGolden: the test recipe's graph with an empty cache, keys
// masked (they follow the source and the toolchain): which steps exist,
// what each waits for, what it weighs, what can be keyed before anything
// runs.
func TestPlanGolden(t *testing.T) {
	testutil.RequireTool(t, "go")
	p, err := planLane(context.Background(), loadTestRecipe(t), Options{
		OutputDir: filepath.Join(t.TempDir(), "out"), CacheDir: t.TempDir(), Jobs: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Steps {
		if (s.Cache == "miss") != (s.Key != "") {
			t.Errorf("%s: cache %s with key %q: a step is keyed exactly when it is a hit or a miss", s.Step, s.Cache, s.Key)
		}
	}
	var text bytes.Buffer
	if err := p.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	got := hexKey.ReplaceAllString(text.String(), "<key>")
	got = strings.ReplaceAll(got, p.Output, "<out>")
	testutil.Golden(t, "testdata/plan-test.golden", []byte(got))
	var js bytes.Buffer
	if err := json.NewEncoder(&js).Encode(p); err != nil {
		t.Fatal(err)
	}
	var back Plan
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Steps) != len(p.Steps) {
		t.Errorf("--plan --json does not read back: %v", err)
	}
}

// parseEvents reads --json progress: every line an progress.Event, states known,
// each step started once and then done or failed once, counters sane.
func parseEvents(t *testing.T, data []byte) map[string]progress.Event {
	t.Helper()
	last := map[string]progress.Event{}
	started := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e progress.Event
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("progress line %q: %v", sc.Text(), err)
		}
		switch e.State {
		case "log":
			if e.Message == "" || e.Step != "" {
				t.Errorf("log event %+v: want a message and no step", e)
			}
			continue
		case "start":
			if started[e.Step] {
				t.Errorf("%s started twice", e.Step)
			}
			started[e.Step] = true
		case "progress", "done", "failed":
			if !started[e.Step] {
				t.Errorf("%s: %s before start", e.Step, e.State)
			}
			if prev := last[e.Step]; prev.State == "done" || prev.State == "failed" {
				t.Errorf("%s: %s after %s", e.Step, e.State, prev.State)
			}
		default:
			t.Errorf("unknown state in %q", sc.Text())
		}
		if e.Step == "" || e.Elapsed < 0 || (e.Total > 0 && e.Done > e.Total) {
			t.Errorf("malformed event %q", sc.Text())
		}
		last[e.Step] = e
	}
	for step, e := range last {
		if e.State != "done" && e.State != "failed" {
			t.Errorf("%s never finished (last %s)", step, e.State)
		}
	}
	return last
}

// TestPlanMatchesBuildAndNothingChanged builds the test recipe with --json
// progress, then plans it: every step the build ran or took from the cache
// is a hit in the plan under the key the build reported, and the output is
// up to date. A second build then writes nothing: no step starts and every
// artifact keeps its inode and change time.
func TestPlanMatchesBuildAndNothingChanged(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs")
	if testing.Short() {
		t.Skip("builds an image")
	}
	out := filepath.Join(t.TempDir(), "out")
	opts := Options{OutputDir: out, CacheDir: cache.DefaultDir(), ProgressMode: progress.ModeJSON}
	var events bytes.Buffer
	opts.Progress = &events
	m, err := buildLane(context.Background(), loadTestRecipe(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	done := parseEvents(t, events.Bytes())
	p, err := planLane(context.Background(), loadTestRecipe(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	if !p.UpToDate || p.InputKey != m.InputKey || m.InputKey == "" {
		t.Errorf("plan after the build: up to date %v, key %s; manifest key %s", p.UpToDate, p.InputKey, m.InputKey)
	}
	for _, s := range p.Steps {
		e, ok := done[s.Step]
		switch {
		case !ok:
			t.Errorf("%s is in the plan but the build never reported it", s.Step)
		case e.State != "done":
			t.Errorf("%s: %s", s.Step, e.State)
		case s.Cache == "write":
			t.Errorf("%s: plan says write after the build wrote it; want reuse", s.Step)
		case s.Cache != "hit" && s.Cache != "reuse" || s.Key != e.Key:
			t.Errorf("%s: plan says %s %s, the build reported key %s", s.Step, s.Cache, s.Key, e.Key)
		}
	}

	ids := map[string]sealedFile{}
	for _, a := range m.Artifacts {
		if ids[a.Path], err = identity(filepath.Join(out, a.Path)); err != nil {
			t.Fatal(err)
		}
	}
	events.Reset()
	start := time.Now()
	again, err := buildLane(context.Background(), loadTestRecipe(t), opts)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(events.String(), `"state":"start"`) || !strings.Contains(events.String(), "nothing changed") {
		t.Errorf("a build with nothing changed ran steps:\n%s", events.String())
	}
	if again.InputKey != m.InputKey || len(again.Artifacts) != len(m.Artifacts) {
		t.Errorf("the up-to-date build returned another manifest")
	}
	for _, a := range m.Artifacts {
		if id, err := identity(filepath.Join(out, a.Path)); err != nil || id != ids[a.Path] {
			t.Errorf("%s was rewritten (%+v, was %+v)", a.Path, id, ids[a.Path])
		}
	}
	t.Logf("nothing changed: %v", took)
}

// TestReuseGivesWrittenBytes: after a kernel command line change outside
// the osb.* words (which the initrds carry: docs/cmdline.md) the
// build takes the root image and the live initrd from its previous output
// (hard links: same inodes) and writes the rest; the result is byte for
// byte what a build into an empty directory writes.
func TestReuseGivesWrittenBytes(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs")
	if testing.Short() {
		t.Skip("builds an image")
	}
	tmp := t.TempDir()
	out := filepath.Join(tmp, "out")
	var log bytes.Buffer
	opts := Options{OutputDir: out, CacheDir: cache.DefaultDir(), Progress: &log}
	if _, err := buildLane(context.Background(), loadTestRecipe(t), opts); err != nil {
		t.Fatal(err)
	}
	before := map[string]sealedFile{}
	for _, name := range []string{artifacts.FileRootfs, artifacts.FileInitrd, artifacts.FileUKI} {
		id, err := identity(filepath.Join(out, name))
		buildertest.Must(t, err)
		before[name] = id
	}
	changed := func() *recipe.Recipe {
		r := loadTestRecipe(t)
		r.Kernel.Cmdline += " loglevel=4"
		return r
	}
	log.Reset()
	reused, err := buildLane(context.Background(), changed(), opts)
	buildertest.Must(t, err)
	for _, name := range []string{artifacts.FileRootfs, artifacts.FileInitrd} {
		id, err := identity(filepath.Join(out, name))
		buildertest.Must(t, err)
		if id.Ino != before[name].Ino {
			t.Errorf("%s was written again, want it taken from the previous output", name)
		}
		if !strings.Contains(log.String(), "reused "+name) {
			t.Errorf("the build did not say it reused %s:\n%s", name, log.String())
		}
	}
	if id, _ := identity(filepath.Join(out, artifacts.FileUKI)); id.Ino == before[artifacts.FileUKI].Ino {
		t.Error("the UKI, whose command line changed, was reused")
	}
	fresh, err := buildLane(context.Background(), changed(), Options{OutputDir: filepath.Join(tmp, "fresh"), CacheDir: opts.CacheDir})
	buildertest.Must(t, err)
	if !reflect.DeepEqual(reused.Artifacts, fresh.Artifacts) {
		t.Errorf("reusing build:\n%+v\nfresh build:\n%+v", reused.Artifacts, fresh.Artifacts)
	}
	for _, a := range reused.Artifacts {
		if got := testutil.FileSHA256(t, filepath.Join(out, a.Path)); got != a.SHA256 {
			t.Errorf("%s: sha256 %s, manifest says %s", a.Path, got, a.SHA256)
		}
	}
}

// fakeOutput writes an output directory with two artifacts and a manifest
// under key, as a build would leave it, and seals it.
func fakeOutput(t testing.TB, key string) (dir string, m osimage.BuildManifest) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "out")
	os.Mkdir(dir, 0o755)
	m = osimage.BuildManifest{Recipe: "test", InputKey: key}
	for _, f := range []struct{ name, data string }{{"vmlinuz", "kernel"}, {"disk.raw", strings.Repeat("disk", 1000)}} {
		p := testutil.WriteFile(t, dir, f.name, []byte(f.data))
		d, _ := filehash.SHA256(p)
		m.Artifacts = append(m.Artifacts, osimage.Artifact{Kind: "x", Path: f.name, Size: int64(len(f.data)), SHA256: d})
	}
	data, _ := json.Marshal(m)
	testutil.WriteFile(t, dir, osimage.ManifestFile, data)
	return dir, m
}

// TestUpToDate: the output counts as unchanged only with the same input
// key and each artifact the same file (inode and change time, else its
// hash); a same-size rewrite in place or a replaced file is a change.
func TestUpToDate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, dir string)
		key    string
		verify bool
		want   bool
	}{
		{name: "unchanged", want: true},
		{name: "unchanged, verified", verify: true, want: true},
		{name: "other key", key: "other"},
		{name: "same size rewritten", change: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "disk.raw"), []byte(strings.Repeat("DISK", 1000)), 0o644)
		}},
		{name: "same bytes rewritten (hashed, then resealed)", want: true, change: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "disk.raw"), []byte(strings.Repeat("disk", 1000)), 0o644)
		}},
		{name: "replaced by a same-size file", change: func(t *testing.T, dir string) {
			p := testutil.WriteFile(t, dir, ".new", []byte("kernex"))
			os.Rename(p, filepath.Join(dir, "vmlinuz"))
		}},
		{name: "truncated", change: func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(dir, "disk.raw"), 10)
		}},
		{name: "missing", change: func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "vmlinuz"))
		}},
		{name: "manifest edited", change: func(t *testing.T, dir string) {
			p := filepath.Join(dir, osimage.ManifestFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte(`"test"`), []byte(`"tesT"`), 1), 0o644)
		}, want: true}, // the key and files still match: the hash says so
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := openStore(t)
			dir, m := fakeOutput(t, "k1")
			data, _ := os.ReadFile(filepath.Join(dir, osimage.ManifestFile))
			abs, _ := filepath.Abs(dir)
			if err := writeSeal(store, abs, data, m.Artifacts, nil); err != nil {
				t.Fatal(err)
			}
			if tc.change != nil {
				time.Sleep(10 * time.Millisecond) // a ctime tick on coarse clocks
				tc.change(t, dir)
			}
			key := "k1"
			if tc.key != "" {
				key = tc.key
			}
			got, ok, err := upToDate(dir, key, store, tc.verify, true)
			if err != nil {
				t.Fatal(err)
			}
			if ok != tc.want || (ok && got.InputKey != "k1") {
				t.Errorf("upToDate = %v, want %v", ok, tc.want)
			}
			if ok {
				b, _ := os.ReadFile(filepath.Join(dir, osimage.ManifestFile))
				if !sealHolds(store, abs, b, got.Artifacts) {
					t.Error("an output found unchanged is not sealed for the next check")
				}
			}
		})
	}
}

// TestFailingStepCancelsSiblings: a go source that cannot be downloaded
// fails while mmdebstrap runs the bootstrap beside it. The bootstrap must be
// stopped (not waited for: it takes minutes), leave no process behind, and
// the previous output and the cache stay as they were.
func TestFailingStepCancelsSiblings(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs")
	if testing.Short() {
		t.Skip("starts mmdebstrap")
	}
	cacheDir := t.TempDir()
	old, _ := fakeOutput(t, "old")
	before, _ := os.ReadFile(filepath.Join(old, osimage.ManifestFile))
	r := loadTestRecipe(t)
	r.Resolved[0].Go = append(r.Resolved[0].Go, recipe.GoBuild{
		Module: "example.invalid/osb/none", Version: "v0.0.1", Package: ".", Binary: "/usr/local/bin/none",
		// Pinned in the recipe, so pinning the sources asks no proxy and
		// the failure comes from the go step, beside the bootstrap.
		Sum: "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
	})
	// The module proxy answers "not found" only after a while, so the
	// failure comes while mmdebstrap is well under way.
	const late = 15 * time.Second
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-time.After(late):
		case <-req.Context().Done():
		}
		http.NotFound(w, req)
	}))
	defer proxy.Close()
	t.Setenv("GOPROXY", proxy.URL)
	t.Setenv("GONOSUMDB", "example.invalid")
	var log bytes.Buffer
	start := time.Now()
	_, err := buildLane(context.Background(), r, Options{OutputDir: old, CacheDir: cacheDir, Jobs: 2, Progress: &log, ProgressMode: progress.ModePlain})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "go:example.invalid/osb/none@v0.0.1: layer test-hello") {
		t.Fatalf("build = %v, want the go step's failure", err)
	}
	if !strings.Contains(log.String(), "bootstrap: start") {
		t.Fatalf("the bootstrap did not run beside the failing step:\n%s", log.String())
	}
	if took > late+time.Minute {
		t.Errorf("the build took %v: it waited for the bootstrap instead of cancelling it", took)
	}
	after, _ := os.ReadFile(filepath.Join(old, osimage.ManifestFile))
	if !bytes.Equal(before, after) {
		t.Error("the failed build changed the previous output")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(old), ".out.staging-*")); len(left) > 0 {
		t.Errorf("staging left behind: %v", left)
	}
	cached, lerr := openStoreAt(t, cacheDir).List()
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, e := range cached {
		if e.Step == "bootstrap" {
			t.Errorf("the cancelled bootstrap left a cache entry %s", e.Key)
		}
	}
	// No mmdebstrap of this build survives it.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte("mmdebstrap")) && bytes.Contains(b, []byte(cacheDir)) {
			pid := filepath.Base(filepath.Dir(p))
			t.Errorf("mmdebstrap (pid %s) still runs after the build returned", pid)
			syscall.Kill(atoi(pid), syscall.SIGKILL)
		}
	}
	t.Logf("failed after %v: %v\n%s", took, err, log.String())
}

func openStore(t *testing.T) *cache.Store { return openStoreAt(t, t.TempDir()) }

func openStoreAt(t *testing.T, dir string) *cache.Store {
	t.Helper()
	s, err := cache.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// fuzzSealed is what FuzzSeal and FuzzPreviousOutput check seals against,
// made once per fuzzing process: an output directory, its manifest, and
// the seal the build writes for it, the seed mutations start from (the
// fuzzer cannot guess an inode). The targets parse the fuzzed bytes as
// the seal read from the cache directory: nothing is written per input.
type fuzzSealed struct {
	dir      string // absolute
	manifest []byte
	m        osimage.BuildManifest
	seal     []byte
}

func newFuzzSealed(f *testing.F, keys map[string]string) fuzzSealed {
	store, err := cache.Open(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	dir, m := fakeOutput(f, "k")
	if dir, err = filepath.Abs(dir); err != nil {
		f.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, osimage.ManifestFile))
	if err != nil {
		f.Fatal(err)
	}
	if err := writeSeal(store, dir, manifest, m.Artifacts, keys); err != nil {
		f.Fatal(err)
	}
	seal, err := os.ReadFile(sealPath(store, dir))
	if err != nil {
		f.Fatal(err)
	}
	return fuzzSealed{dir: dir, manifest: manifest, m: m, seal: seal}
}

// FuzzSeal: a seal file is read back from the cache directory; whatever it
// holds, it must not pass for an output it does not describe.
func FuzzSeal(f *testing.F) {
	sf := newFuzzSealed(f, nil)
	if !sealMatches(sf.seal, sf.dir, sf.manifest, sf.m.Artifacts) {
		f.Fatal("the build's own seal does not hold: the fuzzer would see rejections only")
	}
	f.Add(sf.seal)
	f.Add(bytes.Replace(sf.seal, []byte(`"ctimeNs":`), []byte(`"ctimeNs":1`), 1))
	f.Add([]byte(`{"output":"/x","manifest":"00","files":[{"path":"vmlinuz","size":6}]}`))
	f.Add([]byte(`{"files":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if !sealMatches(data, sf.dir, sf.manifest, sf.m.Artifacts) {
			return
		}
		// Accepted: then it names exactly these files as they are.
		var s seal
		if err := json.Unmarshal(data, &s); err != nil || len(s.Files) != len(sf.m.Artifacts) {
			t.Fatalf("seal accepted that does not list the artifacts: %v", err)
		}
		for i, a := range sf.m.Artifacts {
			if id, err := identity(filepath.Join(sf.dir, a.Path)); err != nil || !s.Files[i].sameFile(id) {
				t.Fatalf("seal accepted for %s with %+v, file is %+v (%v)", a.Path, s.Files[i], id, err)
			}
		}
	})
}

// FuzzPreviousOutput: whatever the seal says, reuse is offered only for a
// manifest artifact that is the very file the seal names.
func FuzzPreviousOutput(f *testing.F) {
	sf := newFuzzSealed(f, map[string]string{"vmlinuz": "k", "disk.raw": "k2"})
	if p := previousFrom(sf.dir, sf.manifest, sf.seal); p == nil || len(p.arts) != 2 {
		f.Fatal("the build's own seal offers no reuse: the fuzzer would see rejections only")
	}
	f.Add(sf.seal)
	f.Add(bytes.Replace(sf.seal, []byte(`"ino":`), []byte(`"ino":1`), 1))
	f.Add([]byte(`{"output":"/x","manifest":"00","files":[{"path":"vmlinuz","size":6,"key":"k"}]}`))
	f.Add([]byte(`{"files":[{"path":"../etc/passwd","key":"k"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		prev := previousFrom(sf.dir, sf.manifest, data)
		if prev == nil {
			return
		}
		var s seal
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatalf("offered reuse from a seal that does not parse: %v", err)
		}
		for name, a := range prev.arts {
			i := slices.IndexFunc(sf.m.Artifacts, func(x osimage.Artifact) bool { return x.Path == name })
			if i < 0 || a.art != sf.m.Artifacts[i] || a.key == "" {
				t.Fatalf("offered %s (%+v), not an artifact of the manifest", name, a)
			}
			id, err := identity(filepath.Join(sf.dir, name))
			if err != nil || !slices.ContainsFunc(s.Files, func(f sealedFile) bool { return f.Path == name && f.sameFile(id) && f.Key == a.key }) {
				t.Fatalf("offered %s with a seal that does not name it as it is (%v)", name, err)
			}
		}
	})
}

// TestPreviousOutputReuse: a writer takes files from the previous output
// only with its key recorded for every file it ships, and only while the
// seal still vouches for them.
func TestPreviousOutputReuse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		keys   map[string]string
		change func(t *testing.T, dir string)
		key    string
		ships  []string
		want   bool
	}{
		{name: "same key", keys: map[string]string{"vmlinuz": "k1", "disk.raw": "k2"}, key: "k1", ships: []string{"vmlinuz"}, want: true},
		{name: "other key", keys: map[string]string{"vmlinuz": "k1"}, key: "k2", ships: []string{"vmlinuz"}},
		{name: "one file of two keyed", keys: map[string]string{"vmlinuz": "k1"}, key: "k1", ships: []string{"vmlinuz", "disk.raw"}},
		{name: "no keys recorded", key: "k1", ships: []string{"vmlinuz"}},
		{name: "changed since", keys: map[string]string{"vmlinuz": "k1"}, key: "k1", ships: []string{"vmlinuz"}, change: func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("kernex"), 0o644)
		}},
		{name: "replaced since", keys: map[string]string{"vmlinuz": "k1"}, key: "k1", ships: []string{"vmlinuz"}, change: func(t *testing.T, dir string) {
			p := testutil.WriteFile(t, dir, ".new", []byte("kernel"))
			os.Rename(p, filepath.Join(dir, "vmlinuz"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := openStore(t)
			dir, m := fakeOutput(t, "old")
			abs, _ := filepath.Abs(dir)
			data, _ := os.ReadFile(filepath.Join(dir, osimage.ManifestFile))
			if err := writeSeal(store, abs, data, m.Artifacts, tc.keys); err != nil {
				t.Fatal(err)
			}
			if tc.change != nil {
				time.Sleep(10 * time.Millisecond) // a ctime tick on coarse clocks
				tc.change(t, dir)
			}
			stage := t.TempDir()
			arts, err := readPreviousOutput(store, abs).reuse(stage, tc.key, tc.ships)
			if !tc.want {
				if !errors.Is(err, errNotReusable) {
					t.Fatalf("reuse: %v, want %v", err, errNotReusable)
				}
				if left, _ := os.ReadDir(stage); len(left) != 0 {
					t.Errorf("a refused reuse left %d files in the staging directory", len(left))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, name := range tc.ships {
				if arts[i].Path != name || testutil.FileSHA256(t, filepath.Join(stage, name)) != arts[i].SHA256 {
					t.Errorf("reused %+v, staged file does not match", arts[i])
				}
			}
		})
	}
}

// TestReuseChangedAfterRead: the previous output is read when the build
// starts and linked from much later; a file replaced or rewritten in
// between, or replaced between the last check and the link, is not taken
// (the writer writes it), and nothing of a refused reuse stays in the
// staging directory.
func TestReuseChangedAfterRead(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ships   []string
		linking bool // change between linkSealed's check and its link
		change  func(t *testing.T, dir string)
	}{
		{name: "replaced by rename", ships: []string{"vmlinuz"}, change: func(t *testing.T, dir string) {
			p := testutil.WriteFile(t, dir, ".new", []byte("kernex")) // same size
			buildertest.Must(t, os.Rename(p, filepath.Join(dir, "vmlinuz")))
		}},
		{name: "rewritten in place", ships: []string{"vmlinuz"}, change: func(t *testing.T, dir string) {
			buildertest.Must(t, os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("kernex"), 0o644))
		}},
		{name: "replaced by a symlink", ships: []string{"vmlinuz"}, change: func(t *testing.T, dir string) {
			buildertest.Must(t, os.Remove(filepath.Join(dir, "vmlinuz")))
			buildertest.Must(t, os.Symlink("disk.raw", filepath.Join(dir, "vmlinuz")))
		}},
		{name: "second of two replaced", ships: []string{"vmlinuz", "disk.raw"}, change: func(t *testing.T, dir string) {
			p := testutil.WriteFile(t, dir, ".new", []byte(strings.Repeat("dosk", 1000)))
			buildertest.Must(t, os.Rename(p, filepath.Join(dir, "disk.raw")))
		}},
		{name: "replaced while linking", ships: []string{"vmlinuz"}, linking: true, change: func(t *testing.T, dir string) {
			p := testutil.WriteFile(t, dir, ".new", []byte("kernex"))
			buildertest.Must(t, os.Rename(p, filepath.Join(dir, "vmlinuz")))
		}},
		{name: "second replaced while linking", ships: []string{"vmlinuz", "disk.raw"}, linking: true, change: func(t *testing.T, dir string) {
			p := testutil.WriteFile(t, dir, ".new", []byte(strings.Repeat("dosk", 1000)))
			buildertest.Must(t, os.Rename(p, filepath.Join(dir, "disk.raw")))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := openStore(t)
			dir, m := fakeOutput(t, "old")
			abs, _ := filepath.Abs(dir)
			data, _ := os.ReadFile(filepath.Join(dir, osimage.ManifestFile))
			keys := map[string]string{"vmlinuz": "k", "disk.raw": "k"}
			buildertest.Must(t, writeSeal(store, abs, data, m.Artifacts, keys))
			prev := readPreviousOutput(store, abs)
			if !prev.has("k", tc.ships) {
				t.Fatal("the sealed output offers nothing to reuse")
			}
			time.Sleep(10 * time.Millisecond) // a ctime tick on coarse clocks
			if tc.linking {
				last := filepath.Join(abs, tc.ships[len(tc.ships)-1])
				linkReuseHook = func(src string) {
					if src == last {
						tc.change(t, dir)
					}
				}
				t.Cleanup(func() { linkReuseHook = nil })
			} else {
				tc.change(t, dir)
			}
			stage := t.TempDir()
			arts, err := prev.reuse(stage, "k", tc.ships)
			if !errors.Is(err, errNotReusable) {
				t.Errorf("reuse: %+v, %v; want %v", arts, err, errNotReusable)
			}
			if left, _ := os.ReadDir(stage); len(left) != 0 {
				t.Errorf("a refused reuse left %d files in the staging directory", len(left))
			}
		})
	}
}
