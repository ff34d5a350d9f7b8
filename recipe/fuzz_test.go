package recipe

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
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
	f.Add([]byte(minimalRecipe+"layers: [layer.yaml]\n"),
		[]byte("name: l\ninclude: [layer.yaml]\nunits: [{name: hello.service, enable: true}]\nfiles: [{source: f.txt, destination: /f}]\n"))

	// The paths through symlinks that must neither escape the tree nor loop:
	// "self" links to the tree itself, "up" out of it.
	f.Add([]byte(minimalRecipe+"layers: [self/layer.yaml, layer.yaml]\n"),
		[]byte("name: l\ninclude: [self/self/layer.yaml]\n"))
	f.Add([]byte(minimalRecipe+"layers: [layer.yaml]\n"),
		[]byte("name: l\nfiles:\n  - {source: up/etc/passwd, destination: /a}\n  - {source: ../../../etc/passwd, destination: /b}\n  - {source: self/link, destination: /c, mode: \"0644\"}\n"))
	f.Add([]byte(minimalRecipe+"layers: [layer.yaml]\n"),
		[]byte("name: l\nfiles: [{source: self/f.txt, destination: /f}, {source: link, destination: /l}]\nunits: [{name: out.service}]\n"))

	// One directory for all inputs: creating and removing a tree per input
	// makes the fuzzer I/O-bound. Load only reads, so reusing it is safe.
	dir := testutil.ScratchDir(f)
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
	for name, target := range map[string]string{"self": ".", "up": "..", "link": "/etc/passwd", "units/out.service": "/etc/passwd"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			f.Fatal(err)
		}
	}
	tree, err := filepath.EvalSymlinks(dir)
	if err != nil {
		f.Fatal(err)
	}

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
		for _, file := range r.Files() {
			parent, err := filepath.EvalSymlinks(filepath.Dir(file.Source))
			if err != nil || !within(tree, filepath.Join(parent, filepath.Base(file.Source))) {
				t.Errorf("accepted source %s outside the tree %s (%v)", file.Source, tree, err)
			}
		}
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

// FuzzParseLock: a lock file is outside input. Whatever the bytes, the
// parser must not panic, and a lock it accepts must survive Marshal and
// ParseLock unchanged (the canonical form is a fixed point).
func FuzzParseLock(f *testing.F) {
	for _, p := range []string{"../recipes/hypervisor.lock", "../recipes/test.lock", "testdata/lock/format.lock.golden"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("version: 1\nsources:\n  - {layer: a, kind: oci, ref: \"h/r:t\", digest: x}\n  - [1, 2]\n"))
	f.Add([]byte("version: 1\nsources: {a: b}\n"))
	f.Add([]byte("version: &v 1\nsources: *v\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLock("fuzz.lock", data)
		if err != nil {
			return
		}
		out := l.Marshal()
		back, err := ParseLock("fuzz.lock", out)
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, out)
		}
		if again := back.Marshal(); string(again) != string(out) {
			t.Fatalf("canonical form is not stable:\n%s\n---\n%s", out, again)
		}
		if len(back.Sources) != len(l.Sources) {
			t.Fatalf("%d sources became %d", len(l.Sources), len(back.Sources))
		}
	})
}
