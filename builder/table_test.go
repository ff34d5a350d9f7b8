package builder

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/recipe"
)

// tableFor is the node table of the test recipe with a go and an oci
// source and every output: every kind of node there is.
func tableFor(t *testing.T) []node {
	r := buildertest.TestRecipe(t)
	r.Outputs = recipe.Outputs
	r.Resolved = append(r.Resolved, &recipe.Layer{
		Name: "sources",
		Go:   []recipe.GoBuild{{Module: "example.com/m", Version: "v1.0.0", Package: ".", Binary: "/usr/bin/m"}},
		OCI:  []recipe.OCISource{{Image: "example.com/i:v1@sha256:" + strings.Repeat("0", 64), Paths: map[string]string{"/a": "/usr/bin/a"}}},
	})
	b := &buildRun{r: r, opts: Options{CacheDir: t.TempDir()}, art: artifacts.Config{Outputs: r.OutputSet()}, log: progress.New(nil, false, progress.ModePlain)}
	ns, _ := b.table("")
	return ns
}

// docTable renders nodes as docs/build-graph.md shows them: each node, the
// nodes it needs, what it hands on, its jobs and memory, and whether it is
// cached. One go and one oci row stand for one per source.
func docTable(ns []node) string {
	var b strings.Builder
	b.WriteString("| step | needs | hands on | jobs | memory | cached |\n|---|---|---|---|---|---|\n")
	general := func(name string) string {
		switch {
		case strings.HasPrefix(name, "go:"):
			return "go:MODULE@VERSION"
		case strings.HasPrefix(name, "oci:"):
			return "oci:IMAGE"
		}
		return name
	}
	or := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, n := range ns {
		var needs, gives []string
		for _, d := range n.deps() {
			needs = append(needs, "`"+general(d)+"`")
		}
		for _, g := range n.gives {
			gives = append(gives, g.What())
		}
		cached := "yes"
		if n.writer != nil {
			cached = "no: written into the staging directory"
		}
		mem := fmt.Sprintf("%d MiB", n.mem)
		if n.mem%1024 == 0 {
			mem = fmt.Sprintf("%d GiB", n.mem/1024)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %d | %s | %s |\n", general(n.name), or(strings.Join(needs, ", ")), or(strings.Join(gives, ", ")), max(n.jobs, 1), mem, cached)
	}
	return b.String()
}

// TestBuildGraphDoc: docs/build-graph.md's table is the node table the
// build runs (-update rewrites it).
func TestBuildGraphDoc(t *testing.T) {
	path := filepath.Join(buildertest.RepoRoot(t), "docs/build-graph.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?s)(<!-- node table[^\n]*-->\n)(.*?)(<!-- end node table -->)`)
	m := re.FindSubmatchIndex(doc)
	if m == nil {
		t.Fatalf("%s: no node table markers", path)
	}
	want := docTable(tableFor(t))
	if got := string(doc[m[4]:m[5]]); got != want {
		if testutil.Updating() {
			doc = append(append(append([]byte{}, doc[:m[4]]...), want...), doc[m[5]:]...)
			if err := os.WriteFile(path, doc, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's node table is not the build's (go test ./builder -run TestBuildGraphDoc -update rewrites it):\n--- doc\n%s--- table\n%s", path, got, want)
	}
}

// TestTableNeedsAreGiven: every value a node needs is handed on by the node
// it names, and a node hands on only values that name it.
func TestTableNeedsAreGiven(t *testing.T) {
	ns := tableFor(t)
	given := map[any]bool{}
	for _, n := range ns {
		for _, g := range n.gives {
			if g.From() != n.name {
				t.Errorf("%s hands on %q, which names %s", n.name, g.What(), g.From())
			}
			given[g] = true
		}
	}
	for _, n := range ns {
		for _, h := range n.needs {
			if !given[h] {
				t.Errorf("%s needs %q from %s, which no node hands on", n.name, h.What(), h.From())
			}
		}
	}
}

// TestBuildGraphDocArchitectures: docs/build-graph.md's graph of a recipe
// of two architectures (recipes/test-multiarch.yaml) is the one the build
// makes of it (-update rewrites it).
func TestBuildGraphDocArchitectures(t *testing.T) {
	root := buildertest.RepoRoot(t)
	r, err := recipe.Load(filepath.Join(root, "recipes/test-multiarch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lanes, err := Lanes(r, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("| node | needs |\n|---|---|\n")
	for _, l := range lanes {
		ra := l.Recipe
		run := &buildRun{r: ra, prefix: ra.Base.Architecture + "/", opts: Options{CacheDir: t.TempDir()},
			art: artifacts.Config{Outputs: ra.OutputSet(), Arch: ra.Base.Architecture}, log: progress.New(nil, false, progress.ModePlain)}
		ns, _ := run.table("")
		for _, n := range ns {
			name, deps := run.graphNode(n)
			needs := "-"
			if len(deps) > 0 {
				needs = "`" + strings.Join(deps, "`, `") + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s |\n", name, needs)
		}
	}
	want := b.String()
	path := filepath.Join(root, "docs/build-graph.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?s)(<!-- architectures graph[^\n]*-->\n)(.*?)(<!-- end architectures graph -->)`)
	m := re.FindSubmatchIndex(doc)
	if m == nil {
		t.Fatalf("%s: no architectures graph markers", path)
	}
	if got := string(doc[m[4]:m[5]]); got != want {
		if testutil.Updating() {
			doc = append(append(append([]byte{}, doc[:m[4]]...), want...), doc[m[5]:]...)
			if err := os.WriteFile(path, doc, 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("%s's architectures graph is not the build's (go test ./builder -run TestBuildGraphDocArchitectures -update rewrites it):\n--- doc\n%s--- graph\n%s", path, got, want)
	}
}

func TestLaneJobs(t *testing.T) {
	for _, tt := range []struct{ jobs, slots, lanes, want int }{
		{2, 2, 1, 2}, // one architecture: as the table says
		{2, 2, 2, 1}, // two on two cores: assemble beside the other's bootstrap
		{2, 8, 2, 2},
		{1, 1, 2, 1}, // never none
	} {
		if got := laneJobs(tt.jobs, tt.slots, tt.lanes); got != tt.want {
			t.Errorf("laneJobs(%d, %d, %d) = %d, want %d", tt.jobs, tt.slots, tt.lanes, got, tt.want)
		}
	}
}
