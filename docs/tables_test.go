package docs_test

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	bootcli "github.com/ironcore-dev/os-builder/boot/cli"
	buildercli "github.com/ironcore-dev/os-builder/builder/cli"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/recipe"
)

// section returns the Markdown of file from the heading title to the
// next heading of the same or a higher level.
func section(t *testing.T, file, title string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+title+"\n")
	if i < 0 {
		t.Fatalf("%s has no heading %q", file, title)
	}
	s = s[i+1+len(title):]
	level := title[:strings.IndexByte(title, ' ')+1]
	for _, h := range []string{"\n# ", "\n## ", "\n### "} {
		if len(h)-1 > len(level) {
			break
		}
		if j := strings.Index(s, h); j >= 0 {
			s = s[:j]
		}
	}
	return s
}

// firstColumn returns the first cells of a section's table rows.
func firstColumn(s string) []string {
	var cells []string
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells = append(cells, strings.TrimSpace(strings.Split(line, "|")[1]))
	}
	return cells
}

// TestREADMEExitCodes: README.md's table lists exactly the codes package
// exitcode defines, in order, each once, saying what --help says.
func TestREADMEExitCodes(t *testing.T) {
	var documented, defined []string
	for _, line := range strings.Split(section(t, "../README.md", "## Exit codes"), "\n") {
		if cells := strings.Split(line, "|"); len(cells) == 4 && line[:2] != "|-" && !strings.Contains(line, "| code |") {
			documented = append(documented, strings.TrimSpace(cells[1])+" "+strings.TrimSpace(cells[2]))
		}
	}
	for _, c := range exitcode.All {
		defined = append(defined, strconv.Itoa(c.Value)+" "+c.String())
	}
	if !slices.Equal(documented, defined) {
		t.Errorf("README.md exit codes:\n%s\ninternal/exitcode defines:\n%s", strings.Join(documented, "\n"), strings.Join(defined, "\n"))
	}
}

// TestRecipeFieldsDocumented: every field a recipe or layer file may set
// has a row in docs/recipes.md's tables (go[].sum was missing).
func TestRecipeFieldsDocumented(t *testing.T) {
	b, err := os.ReadFile("recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, cell := range firstColumn(string(b)) {
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cell, -1) {
			documented[m[1]] = true
		}
	}
	var fields []string
	yamlFields("", reflect.TypeFor[recipe.Recipe](), &fields)
	yamlFields("", reflect.TypeFor[recipe.Layer](), &fields)
	for _, f := range fields {
		if !documented[f] {
			t.Errorf("docs/recipes.md has no table row for field %s", f)
		}
	}
}

// yamlFields lists the settable fields of t as docs name them (base.release,
// files[].mode). Fields the loader fills (resolved, path) are left out.
func yamlFields(prefix string, t reflect.Type, out *[]string) {
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" || name == "resolved" || name == "path" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			yamlFields(prefix+name+".", ft, out)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			yamlFields(prefix+name+"[].", ft.Elem(), out)
		default:
			*out = append(*out, prefix+name)
		}
	}
}

// TestOneDefaultCacheDir: README.md's main job and `make test` cached in
// different directories, so a newcomer built everything twice. Now the
// Makefile keeps builder's default and README.md and `builder --help` say
// what it is.
func TestOneDefaultCacheDir(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^[^#\n]*OSB_CACHE_DIR\s*[?:]?=.*$`).Find(mk); m != nil {
		t.Errorf("Makefile sets its own cache directory: %s", m)
	}
	// Tests and benchmarks use cache.DefaultDir too (they had their
	// own fallback, $TMPDIR/os-builder-test-cache).
	ownCache := regexp.MustCompile(`"os-builder[a-z-]*-cache"`)
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != ".." && (d.Name() == "out" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || path == filepath.Join("..", "cache", "dir.go") {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil && ownCache.Match(b) {
			t.Errorf("%s names a cache directory of its own: %s", path, ownCache.Find(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	const dflt = "$OSB_CACHE_DIR, else $XDG_CACHE_HOME/os-builder, else ~/.cache/os-builder"
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(strings.Fields(strings.ReplaceAll(string(readme), "`", "")), " "), dflt) {
		t.Errorf("README.md does not name the default cache directory %q", dflt)
	}
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			if f := fs.Lookup("cache-dir"); f != nil {
				n++
				if !strings.Contains(f.Usage, dflt) {
					t.Errorf("%s --cache-dir: %q does not say %q", c.CommandPath(), f.Usage, dflt)
				}
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(buildercli.Command(io.Discard, io.Discard))
	if n < 2 {
		t.Errorf("found %d --cache-dir flags in builder", n)
	}
}

// reportsNothing are the commands without --json: their output is a
// document of its own (ignition example), or they report nothing.
var reportsNothing = map[string]bool{
	"builder ignition example": true,
	"serverboot eject":         true,
}

// TestEveryCommandHasJSON: every command that reports something takes
// --json (push, cache import, cache prune and ignition validate did not).
// Commands added later are walked too.
func TestEveryCommandHasJSON(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			walk(s)
		}
		name := c.CommandPath()
		if !c.Runnable() || c.HasSubCommands() || c.Name() == "help" || strings.Contains(name, " completion") || reportsNothing[name] {
			return
		}
		if c.Flags().Lookup("json") == nil {
			t.Errorf("%s has no --json", name)
		}
	}
	walk(buildercli.Command(io.Discard, io.Discard))
	walk(bootcli.Command(io.Discard, io.Discard))
}

// TestREADMELayout: every path README.md's layout table names exists, and
// every package of the module sits under a path the table names.
func TestREADMELayout(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(readme), "\n## Layout\n")
	if !ok {
		t.Fatal("README.md has no Layout section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	var paths []string
	for _, line := range strings.Split(table, "\n") {
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(first, -1) {
			paths = append(paths, m[1])
		}
	}
	for _, p := range paths {
		if _, err := os.Stat(filepath.Join("..", p)); err != nil {
			t.Errorf("README.md's layout names %s: %v", p, err)
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/ironcore-dev/os-builder/...").Output()
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs("..")
	for _, dir := range strings.Fields(string(out)) {
		rel, _ := filepath.Rel(root, dir)
		covered := false
		for _, p := range paths {
			covered = covered || rel+"/" == p || strings.HasPrefix(rel+"/", strings.TrimSuffix(p, "/")+"/")
		}
		if !covered && !strings.HasSuffix(rel, "test") && !strings.Contains(rel, "testutil") && rel != "docs" && rel != "bench" {
			t.Errorf("package %s is under no path README.md's layout names", rel)
		}
	}
}

// TestREADMEProgressSchema: the README's --json progress clause names
// exactly progress.Event's JSON fields and progress.States.
func TestREADMEProgressSchema(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(b)), " ")
	_, clause, ok := strings.Cut(text, "with `--json` JSON lines on stderr (")
	if !ok {
		t.Fatal("README.md has no '--json JSON lines on stderr (' clause")
	}
	clause, _, _ = strings.Cut(clause, ");")
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(clause, -1) {
		named[m[1]] = true
	}
	want := map[string]bool{}
	ev := reflect.TypeOf(progress.Event{})
	for i := range ev.NumField() {
		name, _, _ := strings.Cut(ev.Field(i).Tag.Get("json"), ",")
		want[name] = true
	}
	for _, s := range progress.States {
		want[s] = true
	}
	for w := range want {
		if !named[w] {
			t.Errorf("README's progress clause does not name %q", w)
		}
	}
	for n := range named {
		if !want[n] {
			t.Errorf("README's progress clause names %q, which is neither a field of progress.Event nor a state", n)
		}
	}
}
