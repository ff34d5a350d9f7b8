package recipe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeTree creates files (path -> content) and symlinks (path -> target,
// for entries whose content starts with "->") under a new directory.
func writeTree(t *testing.T, entries map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range entries {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(content, "->"); ok {
			err = os.Symlink(target, p)
		} else {
			err = os.WriteFile(p, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const minimalRecipe = "name: r\nversion: \"1\"\nbase: {distribution: debian}\nunitsDir: units\n"

// loadWithin runs Load but gives up after limit, so that a loader that
// never ends fails the test instead of hanging it.
func loadWithin(t *testing.T, path string, limit time.Duration) (*Recipe, error) {
	t.Helper()
	type result struct {
		r   *Recipe
		err error
	}
	done := make(chan result, 1)
	go func() {
		r, err := Load(path)
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-time.After(limit):
		t.Fatalf("Load(%s) still running after %v", path, limit)
		return nil, nil
	}
}

// TestIncludeCycleThroughSymlinks: a and b are directories that link to each
// other, and their layers include each other through the links, twice each.
// Every path on the way is new (a/x.yaml, a/b/y.yaml, a/b/a/x.yaml, ...), so
// a loader that compares path strings never sees the cycle and walks 2^40
// paths until the kernel's 40-symlink limit stops each branch; it did, for
// as long as one cared to wait. Files are the same, though: (dev, inode)
// finds the cycle at once.
func TestIncludeCycleThroughSymlinks(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"recipe.yaml": minimalRecipe + "layers: [a/x.yaml]\n",
		"a/x.yaml":    "name: lx\ninclude: [b/y.yaml, b2/y.yaml]\n",
		"a/b":         "->../b",
		"a/b2":        "->../b",
		"b/y.yaml":    "name: ly\ninclude: [a/x.yaml, a2/x.yaml]\n",
		"b/a":         "->../a",
		"b/a2":        "->../a",
	})
	_, err := loadWithin(t, filepath.Join(dir, "recipe.yaml"), 10*time.Second)
	want := "include[0]: include cycle: a/x.yaml -> a/b/y.yaml -> a/b/a/x.yaml"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load = %v, want an error containing %q", err, want)
	}
}

// TestSourceStaysInTree: files[].source must resolve inside the directory of
// the top-level recipe, whatever ".." or symlinked directories it goes
// through. A symlink as the source itself is copied as a link (its target is
// a path in the image), so where it points does not matter.
func TestSourceStaysInTree(t *testing.T) {
	outside := writeTree(t, map[string]string{"secret": "registry password"})
	tests := []struct {
		name   string
		source string
		mode   string
		want   string // part of the error; "" for none
	}{
		{"dotdot", "../../outside/secret", "", `files[0].source: "../../outside/secret" resolves to `},
		{"symlinked dir out", "files/out/secret", "", `files[0].source: "files/out/secret" resolves to ` + outside + `/secret, outside the recipe's tree`},
		{"relative symlinked dir out", "files/up/outside/secret", "", `outside the recipe's tree`},
		{"absolute", outside + "/secret", "", "must be relative to the layer file"},
		{"symlinked dir inside", "files/in/f.txt", "0644", ""},
		{"plain file", "files/f.txt", "", ""},
		{"link copied as link", "files/hostlink", "", ""},
		{"link with a mode", "files/hostlink", "0600", `files[0].mode: layers/files/hostlink is a symlink, copied as a link: it has no mode of its own`},
		{"the whole tree", "..", "", ""},
		{"missing", "files/nope", "", "files[0].source: layers/files/nope: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mode := ""
			if tt.mode != "" {
				mode = ", mode: \"" + tt.mode + "\""
			}
			dir := writeTree(t, map[string]string{
				"tree/recipe.yaml":           minimalRecipe + "layers: [layers/l.yaml]\n",
				"tree/layers/l.yaml":         "name: l\nfiles:\n  - {source: " + tt.source + ", destination: /etc/x" + mode + "}\n",
				"tree/layers/files/f.txt":    "x",
				"tree/layers/files/out":      "->" + outside,
				"tree/layers/files/up":       "->../../..",
				"tree/layers/files/in":       "->../../other",
				"tree/other/f.txt":           "x",
				"tree/layers/files/hostlink": "->/lib/systemd/system/no-such.service",
				"outside/secret":             "registry password",
			})
			r, err := Load(filepath.Join(dir, "tree/recipe.yaml"))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if len(r.Files()) != 1 {
					t.Errorf("Files() = %+v", r.Files())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load = %v, want an error containing %q", err, tt.want)
			}
			if !strings.Contains(err.Error(), "l.yaml:3: ") {
				t.Errorf("error does not name file and line: %v", err)
			}
		})
	}
}

// TestSameLayerThroughSymlink: one layer file reached by two paths is one
// layer, applied once at its first position (not a duplicate name).
func TestSameLayerThroughSymlink(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"recipe.yaml":        minimalRecipe + "layers: [layers/top.yaml, alias/common.yaml]\n",
		"layers/top.yaml":    "name: top\ninclude: [common.yaml]\n",
		"layers/common.yaml": "name: common\n",
		"alias":              "->layers",
	})
	r, err := Load(filepath.Join(dir, "recipe.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.LayerNames(), ","); got != "common,top" {
		t.Errorf("layers %s, want common,top", got)
	}
}

// TestUnitLinkStaysInUnitsDir: units are copied with their contents, so a
// unit file that links out of the units directory is refused.
func TestUnitLinkStaysInUnitsDir(t *testing.T) {
	unit := "[Service]\nExecStart=/bin/true\nEnvironment=TOKEN=secret\n[Install]\nWantedBy=multi-user.target\n"
	outside := writeTree(t, map[string]string{"app.service": unit})
	dir := writeTree(t, map[string]string{
		"recipe.yaml":           minimalRecipe + "layers: [l.yaml]\n",
		"l.yaml":                "name: l\nunits: [{name: app.service}, {name: ok.service}]\n",
		"units/app.service":     "->" + outside + "/app.service",
		"units/ok.service":      "->real/ok.service",
		"units/real/ok.service": unit,
	})
	_, err := Load(filepath.Join(dir, "recipe.yaml"))
	want := `l.yaml:2: units[0].name: unit "app.service" is a link to ` + outside + `/app.service, outside units`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load = %v, want an error containing %q", err, want)
	}
	if strings.Contains(err.Error(), "ok.service") {
		t.Errorf("a link inside the units directory is refused: %v", err)
	}
}

// TestOversizedLayerFile: recipe files are read whole, so their size is
// bounded before reading.
func TestOversizedLayerFile(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"recipe.yaml": minimalRecipe + "layers: [big.yaml]\n",
		"big.yaml":    "name: big\n" + strings.Repeat("# padding\n", MaxFileSize/10+1),
	})
	_, err := Load(filepath.Join(dir, "recipe.yaml"))
	if err == nil || !strings.Contains(err.Error(), "layers[0]: layer file big.yaml: larger than 1048576 bytes") {
		t.Fatalf("Load = %v, want the size refused", err)
	}
}

// TestLayerFilesStayInTree: layer files are read from the host like file
// sources, so they too must resolve inside the recipe's tree.
func TestLayerFilesStayInTree(t *testing.T) {
	outside := writeTree(t, map[string]string{"config.json": `{"auths": {"registry": {"auth": "c2VjcmV0"}}}`})
	dir := writeTree(t, map[string]string{
		"tree/recipe.yaml":    minimalRecipe + "layers: [../outside.yaml, layers/l.yaml]\n",
		"tree/layers/l.yaml":  "name: l\ninclude: [creds/config.json, shared/ok.yaml]\n",
		"tree/layers/creds":   "->" + outside,
		"tree/layers/shared":  "->../common",
		"tree/common/ok.yaml": "name: ok\n",
		"outside.yaml":        "name: outside\n",
	})
	_, err := Load(filepath.Join(dir, "tree/recipe.yaml"))
	for _, want := range []string{
		"recipe.yaml:5: layers[0]: layer file ../outside.yaml resolves to " + dir + "/outside.yaml, outside the recipe's tree " + dir + "/tree",
		"l.yaml:2: include[0]: layer file layers/creds/config.json resolves to " + outside + "/config.json, outside the recipe's tree",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load = %v, want an error containing %q", err, want)
		}
	}
	if err != nil && (strings.Contains(err.Error(), "auths") || strings.Contains(err.Error(), "ok.yaml")) {
		t.Errorf("error reads the file outside or refuses the one inside: %v", err)
	}
}
