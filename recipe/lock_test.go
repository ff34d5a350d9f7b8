package recipe

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

var (
	digestA = "sha256:" + strings.Repeat("a", 64)
	digestB = "sha256:" + strings.Repeat("b", 64)
	sumA    = "h1:" + strings.Repeat("A", 43) + "="
)

const lockHeader = "version: 1\nsources:\n"

// TestParseLock pins what the lock parser accepts and how it reports what
// it does not: file, line and field of each problem.
func TestParseLock(t *testing.T) {
	entry := func(layer, kind, ref, digest string) string {
		return "  - layer: " + layer + "\n    kind: " + kind + "\n    ref: " + ref + "\n    digest: \"" + digest + "\"\n"
	}
	tests := []struct {
		name string
		in   string
		want []LockedSource // nil: an error
		err  string
	}{
		{"empty list", "version: 1\nsources: []\n", []LockedSource{}, ""},
		{"no sources", "version: 1\n", []LockedSource{}, ""},
		{"oci and go", lockHeader + entry("app", "oci", "ghcr.io/x/y:v1", digestA) + entry("app", "go", "github.com/x/y@v1.2.3", sumA),
			[]LockedSource{{"app", SourceOCI, "ghcr.io/x/y:v1", digestA}, {"app", SourceGo, "github.com/x/y@v1.2.3", sumA}}, ""},
		{"same ref in two layers", lockHeader + entry("a", "oci", "ghcr.io/x/y:v1", digestA) + entry("b", "oci", "ghcr.io/x/y:v1", digestB),
			[]LockedSource{{"a", SourceOCI, "ghcr.io/x/y:v1", digestA}, {"b", SourceOCI, "ghcr.io/x/y:v1", digestB}}, ""},
		{"empty file", "", nil, "x.lock: version: 0 is not a lock format this builder reads (want 1)"},
		{"future version", "version: 2\nsources: []\n", nil, "x.lock:1: version: 2 is not a lock format"},
		{"unknown field", lockHeader + entry("a", "oci", "ghcr.io/x/y:v1", digestA) + "    tag: v1\n", nil, `x.lock:7: sources[0]: unknown field "tag"`},
		{"wrong type", "version: one\n", nil, `x.lock:1: version: expected an integer, got the string "one"`},
		{"syntax", "version: 1\nsources: [\n", nil, "x.lock:3: invalid YAML"},
		{"bad kind", lockHeader + entry("a", "deb", "ghcr.io/x/y:v1", digestA), nil, `x.lock:4: sources[0].kind: "deb" is not a source kind (oci or go)`},
		{"oci ref with digest", lockHeader + entry("a", "oci", "ghcr.io/x/y:v1@"+digestA, digestA), nil, `x.lock:5: sources[0].ref: "ghcr.io/x/y:v1@` + digestA + `": an image ref names no digest`},
		{"oci ref without tag", lockHeader + entry("a", "oci", "ghcr.io/x/y", digestA), nil, `x.lock:5: sources[0].ref: "ghcr.io/x/y" is not an image reference host/repo:tag`},
		{"oci digest short", lockHeader + entry("a", "oci", "ghcr.io/x/y:v1", "sha256:abc"), nil, `x.lock:6: sources[0].digest: "sha256:abc" is not an image digest`},
		{"oci digest is a sum", lockHeader + entry("a", "oci", "ghcr.io/x/y:v1", sumA), nil, `sources[0].digest: "` + sumA + `" is not an image digest`},
		{"go ref without version", lockHeader + entry("a", "go", "github.com/x/y", sumA), nil, `x.lock:5: sources[0].ref: "github.com/x/y" is not module@version`},
		{"go ref latest", lockHeader + entry("a", "go", "github.com/x/y@latest", sumA), nil, `sources[0].ref: "github.com/x/y@latest" is not module@version`},
		{"go digest is sha256", lockHeader + entry("a", "go", "github.com/x/y@v1.0.0", digestA), nil, `x.lock:6: sources[0].digest: "` + digestA + `" is not a go.sum hash`},
		{"bad layer", lockHeader + entry("\"a b\"", "oci", "ghcr.io/x/y:v1", digestA), nil, `x.lock:3: sources[0].layer: "a b" is not a layer name`},
		{"missing layer", "version: 1\nsources:\n  - kind: oci\n    ref: ghcr.io/x/y:v1\n    digest: \"" + digestA + "\"\n", nil, `x.lock:3: sources[0].layer: required`},
		{"twice", lockHeader + entry("a", "oci", "ghcr.io/x/y:v1", digestA) + entry("a", "oci", "ghcr.io/x/y:v1", digestB), nil, `x.lock:7: sources[1]: oci ghcr.io/x/y:v1 of layer a is locked twice (also x.lock:3)`},
		{"two documents", "version: 1\n---\nversion: 1\n", nil, "x.lock:2: more than one YAML document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Chdir(t.TempDir()) // x.lock is shown relative to the working directory
			l, err := ParseLock(filepath.Join(".", "x.lock"), []byte(tt.in))
			if tt.want == nil {
				if err == nil {
					t.Fatalf("ParseLock accepted it: %+v", l)
				}
				var e *Error
				if !errors.As(err, &e) {
					t.Errorf("no *Error in %T", err)
				}
				if !strings.Contains(err.Error(), tt.err) {
					t.Errorf("error:\n%v\nwant it to contain:\n%s", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := l.Sources
			if got == nil {
				got = []LockedSource{}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("sources = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestLockFormat pins the lock file's bytes: sorted by layer, kind and
// ref whatever order the entries come in, every value quoted; and what
// Marshal writes parses back to the same entries.
func TestLockFormat(t *testing.T) {
	l := &Lock{Version: LockVersion, Sources: []LockedSource{
		{"poollet", SourceGo, "github.com/ironcore-dev/ironcore@v0.5.0", sumA},
		{"dpservice", SourceOCI, "ghcr.io/ironcore-dev/dpservice:v0.3.16", digestB},
		{"app", SourceOCI, "ghcr.io/x/y:v1", digestA},
		{"app", SourceGo, "github.com/x/y@v1.2.3", sumA},
	}}
	got := l.Marshal()
	testutil.Golden(t, "testdata/lock/format.lock.golden", got)
	back, err := ParseLock("format.lock", got)
	if err != nil {
		t.Fatal(err)
	}
	if want := SortedLockedSources(l.Sources); !reflect.DeepEqual(back.Sources, want) {
		t.Errorf("parsed back:\n%+v\nwant:\n%+v", back.Sources, want)
	}
	if again := back.Marshal(); string(again) != string(got) {
		t.Errorf("marshal of the parsed lock differs:\n%s", again)
	}
	empty := (&Lock{Version: LockVersion}).Marshal()
	if _, err := ParseLock("empty.lock", empty); err != nil || !strings.HasSuffix(string(empty), "sources: []\n") {
		t.Errorf("empty lock %q: %v", empty, err)
	}
}

// TestSourcesAndStale: a recipe's sources are listed from every layer,
// excluded ones marked, with the recipe's own digests split off the refs;
// a lock entry is stale only when no layer has its source any more.
func TestSourcesAndStale(t *testing.T) {
	r, err := Load("testdata/lock/recipe.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type src struct {
		layer, kind, ref, digest string
		excluded                 bool
		where                    string
	}
	var got []src
	for _, s := range r.Sources() {
		got = append(got, src{s.Layer, string(s.Kind), s.Ref, s.Digest, s.Excluded, s.Where()})
	}
	want := []src{
		{"app", "oci", "ghcr.io/example/tools:v1", "", false, "testdata/lock/layers/app.yaml:3"},
		{"app", "oci", "ghcr.io/example/pinned:v2", "sha256:" + strings.Repeat("1", 64), false, "testdata/lock/layers/app.yaml:6"},
		{"app", "go", "github.com/example/app@v1.2.3", "", false, "testdata/lock/layers/app.yaml:10"},
		{"app", "go", "github.com/example/summed@v0.1.0", "h1:" + strings.Repeat("A", 43) + "=", false, "testdata/lock/layers/app.yaml:13"},
		{"extra", "oci", "ghcr.io/example/extra:v3", "", true, "testdata/lock/layers/extra.yaml:3"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Sources:\n%+v\nwant:\n%+v", got, want)
	}

	lock, err := ParseLock("recipe.lock", []byte(lockHeader+
		"  - {layer: app, kind: oci, ref: \"ghcr.io/example/tools:v1\", digest: \""+digestA+"\"}\n"+
		"  - {layer: app, kind: oci, ref: \"ghcr.io/example/tools:v0\", digest: \""+digestA+"\"}\n"+ // tag moved on
		"  - {layer: extra, kind: oci, ref: \"ghcr.io/example/extra:v3\", digest: \""+digestB+"\"}\n"+ // excluded, still the recipe's
		"  - {layer: gone, kind: go, ref: \"github.com/example/app@v1.2.3\", digest: \""+sumA+"\"}\n"+ // no such layer
		"  - {layer: app, kind: go, ref: \"github.com/example/app@v1.2.2\", digest: \""+sumA+"\"}\n")) // version moved on
	if err != nil {
		t.Fatal(err)
	}
	if stale := lock.Stale(r); !reflect.DeepEqual(stale, []int{1, 3, 4}) {
		t.Errorf("Stale = %v, want [1 3 4]", stale)
	}
	if e := lock.Errorf(3, "stale"); e.Error() != "recipe.lock:6: sources[3]: stale" {
		t.Errorf("Errorf = %q", e)
	}

	// Pinned gives a copy's layer the digest: an image ref gains it, a
	// module its sum; the recipe it was made from keeps its own.
	var pins []SourcePin
	for _, s := range r.Sources()[:3] {
		d := sumA
		if s.Kind == SourceOCI {
			d = digestB
		}
		pins = append(pins, SourcePin{Source: s, Digest: d})
	}
	beforeOCI, beforeGo := r.Resolved[0].OCI[0].Image, r.Resolved[0].Go[0].Sum
	pinned := r.Pinned(pins)
	app := pinned.Resolved[0]
	if app.OCI[0].Image != "ghcr.io/example/tools:v1@"+digestB || app.OCI[1].Image != "ghcr.io/example/pinned:v2@"+digestB || app.Go[0].Sum != sumA {
		t.Errorf("after Pinned: %+v %+v", app.OCI, app.Go)
	}
	if r.Resolved[0].OCI[0].Image != beforeOCI || r.Resolved[0].Go[0].Sum != beforeGo {
		t.Errorf("Pinned changed the recipe it was given: %+v %+v", r.Resolved[0].OCI, r.Resolved[0].Go)
	}
	// What Pinned set is not the file's own digest: listed again, the
	// copy's sources are as the files have them, located as before (a
	// second build of the same recipe value looks them up in the lock
	// again).
	var again []src
	for _, s := range pinned.Sources() {
		again = append(again, src{s.Layer, string(s.Kind), s.Ref, s.Digest, s.Excluded, s.Where()})
	}
	if !reflect.DeepEqual(again, want) {
		t.Errorf("Sources after Pin:\n%+v\nwant:\n%+v", again, want)
	}
}

// TestShippedLocks: the committed locks parse, are in canonical form (as
// `builder lock` writes them) and lock every source of their recipe but
// the dpservice image, whose registry was unreachable when they were
// written, with no stale entry.
func TestShippedLocks(t *testing.T) {
	for _, name := range []string{"hypervisor", "test"} {
		t.Run(name, func(t *testing.T) {
			r, err := Load("../recipes/" + name + ".yaml")
			if err != nil {
				t.Fatal(err)
			}
			path := LockPath(r.Path)
			if filepath.Base(path) != name+".lock" {
				t.Fatalf("LockPath = %s", path)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			l, err := LoadLock(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(l.Marshal()) != string(data) {
				t.Errorf("%s is not in canonical form; run builder lock", path)
			}
			if stale := l.Stale(r); len(stale) > 0 {
				t.Errorf("stale entries: %v", stale)
			}
			for _, s := range r.Sources() {
				_, locked := l.Find(s)
				if want := s.Layer != "dpservice"; locked != want {
					t.Errorf("%s: locked = %v, want %v", s, locked, want)
				}
			}
		})
	}
}
