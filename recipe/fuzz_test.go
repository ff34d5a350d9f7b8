package recipe

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to the loader as a recipe and as the layer
// it may name: whatever the input, Load and the accessors must not panic.
func FuzzLoad(f *testing.F) {
	seeds := [][2]string{
		{"testdata/render/full/recipe.yaml", "testdata/render/full/layers/app.yaml"},
		{"../recipes/test.yaml", "../recipes/layers/test-hello.yaml"},
		{"testdata/errors/yaml-oddities/recipe.yaml", "testdata/errors/wrong-type-layer/layer.yaml"},
	}
	for _, s := range seeds {
		recipe, err := os.ReadFile(s[0])
		if err != nil {
			f.Fatal(err)
		}
		layer, err := os.ReadFile(s[1])
		if err != nil {
			f.Fatal(err)
		}
		f.Add(recipe, layer)
	}
	f.Add([]byte("name: x\nversion: \"1\"\nbase: {distribution: debian}\nunitsDir: units\nlayers: [layer.yaml]\n"),
		[]byte("name: l\ninclude: [layer.yaml]\nunits: [{name: hello.service, enable: true}]\nfiles: [{source: f.txt, destination: /f}]\n"))

	// One directory for all inputs: creating and removing a tree per input
	// makes the fuzzer I/O-bound. Load only reads, so reusing it is safe.
	dir := f.TempDir()
	write := func(t testing.TB, name string, data []byte) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(f, "f.txt", []byte("x"))
	write(f, "units/hello.service", []byte("[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"))

	f.Fuzz(func(t *testing.T, recipe, layer []byte) {
		write(t, "recipe.yaml", recipe)
		write(t, "layer.yaml", layer)

		r, err := Load(filepath.Join(dir, "recipe.yaml"))
		if err != nil {
			if err.Error() == "" {
				t.Error("empty error message")
			}
			return
		}
		for _, format := range []string{"yaml", "json"} {
			if _, err := Render(r, format); err != nil {
				t.Errorf("Render(%s) of a loaded recipe: %v", format, err)
			}
		}
		r.Packages()
		r.Files()
		r.Units()
		r.Users()
		r.Groups()
		r.Cmdline()
		for _, pkg := range r.Packages() {
			if file, line := r.PackageOrigin(pkg); file == "" || line == 0 {
				t.Errorf("PackageOrigin(%q) = %q, %d", pkg, file, line)
			}
		}
	})
}
