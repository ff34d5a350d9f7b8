package recipe

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestLoadRealTestRecipe makes sure the recipe the builder's end-to-end tests
// build is valid and means what they rely on.
func TestLoadRealTestRecipe(t *testing.T) {
	r, err := Load("../recipes/test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r.Name != "test" || r.Base.Release != "bookworm" || r.Base.Architecture != "amd64" {
		t.Errorf("got name %q release %q arch %q", r.Name, r.Base.Release, r.Base.Architecture)
	}
	wantPkgs := []string{"kmod", "linux-image-amd64", "systemd-sysv", "tpm2-tools", "udev"}
	if got := r.Packages(); !slices.Equal(got, wantPkgs) {
		t.Errorf("Packages() = %v, want %v", got, wantPkgs)
	}
	if got := r.Cmdline(); got != "console=ttyS0" {
		t.Errorf("Cmdline() = %q", got)
	}
	files := r.Files()
	if len(files) != 2 || files[0].Destination != "/etc/os-builder/hello.txt" || files[0].Layer != "test-hello" ||
		files[1].Destination != "/usr/lib/os-builder/boot-report" {
		t.Fatalf("Files() = %+v", files)
	}
	if _, err := os.Stat(files[0].Source); err != nil || !filepath.IsAbs(files[0].Source) {
		t.Errorf("file source %q: absolute %v, stat error %v", files[0].Source, filepath.IsAbs(files[0].Source), err)
	}
	units := r.Units()
	if len(units) != 3 || units[0].Name != "os-builder-hello.service" || !units[0].Enable ||
		units[1].Name != "os-builder-persist-probe.service" || !units[1].Enable ||
		units[2].Name != "osb-boot-report.service" || !units[2].Enable {
		t.Fatalf("Units() = %+v", units)
	}
	if got := r.Persist(); !slices.Equal(got, []string{"/var/lib/osb-persist-test"}) {
		t.Errorf("Persist() = %v", got)
	}
	unit, err := os.ReadFile(units[0].Path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"os-builder: hello from layer", "StandardOutput=journal+console", "WantedBy=multi-user.target"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("%s lacks %q", units[0].Path, want)
		}
	}
	if users := r.Users(); len(users) != 1 || users[0].Name != "osb-test" {
		t.Errorf("Users() = %+v", users)
	}
	if !slices.Equal(r.Outputs, Outputs) {
		t.Errorf("Outputs = %v", r.Outputs)
	}
}

// TestRender pins the resolved form of the fixtures, which also pins include
// order, defaults and every merge rule.
func TestRender(t *testing.T) {
	recipes := map[string]string{
		"full": "testdata/render/full/recipe.yaml",
		"test": "../recipes/test.yaml",
	}
	for name, path := range recipes {
		t.Run(name, func(t *testing.T) {
			r, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, format := range []string{"yaml", "json"} {
				out, err := Render(r, format)
				if err != nil {
					t.Fatal(err)
				}
				again, _ := Render(r, format)
				if string(out) != string(again) {
					t.Errorf("%s output is not deterministic", format)
				}
				testutil.Golden(t, filepath.Join("testdata/render", name+"."+format+".golden"), out)
			}
		})
	}
	if _, err := Render(&Recipe{}, "toml"); err == nil {
		t.Error("Render accepted format toml")
	}
}

func TestMergeRules(t *testing.T) {
	r, err := Load("testdata/render/full/recipe.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// app includes common then net (which includes common again); the
	// recipe lists common once more; debug is excluded by the recipe.
	if got, want := r.LayerNames(), []string{"common", "net", "app"}; !slices.Equal(got, want) {
		t.Errorf("apply order %v, want %v", got, want)
	}
	if !slices.Equal(r.Exclude, []string{"debug"}) {
		t.Errorf("Exclude = %v", r.Exclude)
	}
	if got, want := r.Packages(), []string{"curl", "iproute2", "nftables", "systemd-sysv", "udev"}; !slices.Equal(got, want) {
		t.Errorf("Packages() = %v, want %v (strace belongs to the excluded layer)", got, want)
	}
	if got, want := r.Cmdline(), "console=ttyS0 quiet panic=10 app.debug=0"; got != want {
		t.Errorf("Cmdline() = %q, want %q", got, want)
	}

	files := r.Files()
	var dests []string
	for _, f := range files {
		dests = append(dests, f.Destination+"<-"+f.Layer)
	}
	if want := []string{"/etc/app<-common", "/etc/motd<-app"}; !slices.Equal(dests, want) {
		t.Errorf("Files() = %v, want %v (app overrides common's /etc/motd)", dests, want)
	}
	if mode, ok := files[1].Perm(); !ok || mode != 0o640 {
		t.Errorf("Perm() = %v, %v", mode, ok)
	}
	if _, ok := files[0].Perm(); ok {
		t.Error("Perm() reports a mode for a file without one")
	}

	units := r.Units()
	if len(units) != 2 || units[0].Name != "agent.socket" || !units[0].Enable || units[0].Layer != "net" ||
		units[1].Name != "hello.service" || units[1].Enable {
		t.Errorf("Units() = %+v (agent.socket enabled by app, hello.service enabled only by excluded debug)", units)
	}
	if len(r.Users()) != 1 || len(r.Groups()) != 1 {
		t.Errorf("identical duplicate users are merged: users %+v groups %+v", r.Users(), r.Groups())
	}
	if len(r.Resolved[2].Go) != 2 || r.Resolved[2].Go[1].Package != "." {
		t.Errorf("Go defaults: %+v", r.Resolved[2].Go)
	}
}

func TestExcludeLayers(t *testing.T) {
	r, err := Load("testdata/render/full/recipe.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ExcludeLayers("net", "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("ExcludeLayers(net, nope) = %v, want an error naming nope", err)
	}
	if got := r.LayerNames(); len(got) != 3 {
		t.Fatalf("a failed ExcludeLayers removed layers: %v", got)
	}
	if err := r.ExcludeLayers("net", "debug"); err != nil {
		t.Fatal(err) // debug is already excluded: not an error
	}
	if got, want := r.LayerNames(), []string{"common", "app"}; !slices.Equal(got, want) {
		t.Errorf("layers %v, want %v", got, want)
	}
	if got, want := r.Exclude, []string{"debug", "net"}; !slices.Equal(got, want) {
		t.Errorf("Exclude = %v, want %v", got, want)
	}
	if slices.Contains(r.Packages(), "nftables") {
		t.Error("packages of an excluded layer are still installed")
	}
}

func TestPackageOrigin(t *testing.T) {
	r, err := Load("testdata/render/full/recipe.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		pkg      string
		wantFile string
		wantLine int
	}{
		{"udev", "testdata/render/full/recipe.yaml", 11}, // base wins over common's udev
		{"iproute2", "testdata/render/full/layers/common.yaml", 2},
		{"nftables", "testdata/render/full/layers/net.yaml", 3},
		{"strace", "", 0}, // only in the excluded layer
	}
	for _, tt := range tests {
		file, line := r.PackageOrigin(tt.pkg)
		if file != tt.wantFile || line != tt.wantLine {
			t.Errorf("PackageOrigin(%q) = %s:%d, want %s:%d", tt.pkg, file, line, tt.wantFile, tt.wantLine)
		}
	}
	err = r.PackageError("nftables", "Unable to locate package")
	var e *Error
	if !errors.As(err, &e) || err.Error() != `testdata/render/full/layers/net.yaml:3: packages[1]: package "nftables": Unable to locate package` {
		t.Errorf("PackageError = %v", err)
	}
}

// TestLoadErrors pins the messages for broken recipes: each directory under
// testdata/errors holds one, and error.golden what Load says about it.
func TestLoadErrors(t *testing.T) {
	tests := []struct {
		dir string
		// want is the essence of error.golden, so that an -update cannot
		// silently lose what the case is about.
		want string
	}{
		{"unknown-field", `layer.yaml:5: unknown field "pakages" (did you mean "packages"?)`},
		{"wrong-type", `recipe.yaml:6: layers: expected a list, got the string "layer.yaml"`},
		{"wrong-type-layer", `layer.yaml:6: files[0].mode: expected a string, got 0644 (read as a number); quote it: "0644"`},
		{"missing-required", `layer.yaml:12: go[0].module: required`},
		{"include-cycle", `c.yaml:2: include[0]: include cycle: layers/a.yaml -> layers/b.yaml -> layers/c.yaml -> layers/a.yaml`},
		{"duplicate-layer-names", `two.yaml:2: name: duplicate layer name "same", also used by testdata/errors/duplicate-layer-names/one.yaml:1`},
		{"unknown-unit", `layer.yaml:4: units[1].name: unit "foo.service" not found in ../../units`},
		{"unit-without-install", `layer.yaml:4: units[0].enable: unit "static.service" cannot be enabled`},
		{"oci-bad-ref", `layer.yaml:3: oci[0].image: "ghcr.io/example/tools" names no tag or digest`},
		{"go-latest", `layer.yaml:4: go[0].version: "latest" is not an exact module version`},
		{"bad-mode", `layer.yaml:5: files[0].mode: "0999" is not an octal mode`},
		{"source-outside-tree", `layer.yaml:4: files[0].source: "../../units/hello.service" resolves to testdata/units/hello.service, outside the recipe's tree testdata/errors/source-outside-tree`},
		{"exclude-missing", `recipe.yaml:7: exclude[1]: no layer named "nope" (layers: l)`},
		{"bad-disk", `recipe.yaml:8: disk.dataSizeMiB: 4: want 0 (no data partition) or 8 to 1048576`},
		{"bad-prune", `recipe.yaml:8: prune.exclude[0]: "/usr/share/doc/$(reboot)" is not an absolute path pattern`},
		{"bad-architectures", `recipe.yaml:6: base.architectures[1]: "riscv64" is not supported (one of: amd64, arm64)`},
		{"bad-values", `recipe.yaml:5: base.release: "sid" is not supported (one of: bookworm, trixie)`},
		{"user-conflict", `b.yaml:3: users[0]: user "app" is defined differently at testdata/errors/user-conflict/a.yaml:3`},
		{"syntax-error", `layer.yaml:2: invalid YAML: did not find expected ',' or ']'`},
		{"syntax-error-scanner", `invalid YAML: found a tab character that violates indentation`},
		{"missing-layer-file", `recipe.yaml:6: layers[1]: layer file nowhere.yaml: no such file or directory`},
		{"yaml-oddities", `recipe.yaml:7: outputs[0]: YAML aliases are not supported`},
		{"multiple-documents", `recipe.yaml:5: more than one YAML document`},
		{"empty", `recipe.yaml: name: required`},
	}
	dirs, err := filepath.Glob("testdata/errors/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != len(tests) {
		t.Errorf("%d directories in testdata/errors, %d cases in the table", len(dirs), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			dir := filepath.Join("testdata/errors", tt.dir)
			r, err := Load(filepath.Join(dir, "recipe.yaml"))
			if err == nil {
				t.Fatalf("Load succeeded: %+v", r)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("no *Error in %T: %v", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error lacks %q:\n%v", tt.want, err)
			}
			testutil.Golden(t, filepath.Join(dir, "error.golden"), []byte(err.Error()+"\n"))
		})
	}
}

func TestLoadMissingRecipe(t *testing.T) {
	_, err := Load("testdata/nope.yaml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
}

func TestGoModuleVersion(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.2.3":                               true,
		"v0.0.0-20240101120000-0123456789ab":   true,
		"v1.2.4-0.20191109021931-daa7c04131f5": true,
		"v2.0.0+incompatible":                  true,
		"v1.0.0-rc.1":                          true,
		"latest":                               false,
		"main":                                 false,
		"v1.2":                                 false,
		"1.2.3":                                false,
		"v01.2.3":                              false,
		"v1.0.0-01":                            false,
		"v1.0.0+build":                         false,
		">=v1.2.3":                             false,
	} {
		if got := isGoModuleVersion(v); got != want {
			t.Errorf("isGoModuleVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestDataSizeMiB: disk.dataSizeMiB as set; unset, a data partition only
// when the recipe persists paths.
func TestDataSizeMiB(t *testing.T) {
	size := func(n int) *int { return &n }
	persisting := []*Layer{{Name: "p", Persist: []string{"/var/lib/x"}}}
	tests := []struct {
		name   string
		set    *int
		layers []*Layer
		want   int
	}{
		{"unset, persists", nil, persisting, DefaultDataSizeMiB},
		{"unset, persists nothing", nil, []*Layer{{Name: "l"}}, 0},
		{"0, persists", size(0), persisting, 0},
		{"set", size(1024), nil, 1024},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &Recipe{Disk: Disk{DataSizeMiB: tc.set}, Resolved: tc.layers}
			if got := r.DataSizeMiB(); got != tc.want {
				t.Errorf("DataSizeMiB() = %d, want %d", got, tc.want)
			}
		})
	}
}
