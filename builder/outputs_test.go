package builder

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// writeEarlierOutput lays out what a build leaves: the artifacts and a
// manifest listing them.
func writeEarlierOutput(t *testing.T, dir string, names ...string) {
	t.Helper()
	m := osimage.BuildManifest{Recipe: "test", Version: "0.1.0"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
		m.Artifacts = append(m.Artifacts, osimage.Artifact{Kind: osimage.KindKernel, Path: n, Size: int64(len(n))})
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, osimage.ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestCheckOutputDir: a build may replace only a missing or empty directory
// or an earlier output whose manifest lists everything in it.
func TestCheckOutputDir(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string) // dir exists and is empty
		want  string                         // part of the refusal; "" to accept
	}{
		{"missing", func(t *testing.T, dir string) { os.Remove(dir) }, ""},
		{"empty", func(*testing.T, string) {}, ""},
		{"earlier output", func(t *testing.T, dir string) { writeEarlierOutput(t, dir, "vmlinuz", "initrd.img", "cmdline") }, ""},
		{"unrelated file", func(t *testing.T, dir string) { os.WriteFile(filepath.Join(dir, "notes.txt"), nil, 0o644) },
			`holds "notes.txt" and no manifest.json, so it is not an earlier output of this builder; refusing to replace it`},
		{"many files", func(t *testing.T, dir string) {
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				os.Mkdir(filepath.Join(dir, n), 0o755)
			}
		}, `holds "a", "b", "c" and 2 more and no manifest.json`},
		{"earlier output plus a file", func(t *testing.T, dir string) {
			writeEarlierOutput(t, dir, "vmlinuz")
			os.WriteFile(filepath.Join(dir, "keep.me"), nil, 0o644)
		}, `is an earlier output but also holds "keep.me", which its manifest does not list`},
		{"someone else's manifest.json", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, osimage.ManifestFile), []byte(`{"name": "web", "version": "1"}`), 0o644)
		}, "manifest.json that is not a build manifest (no recipe or artifacts)"},
		{"manifest listing a path outside", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, osimage.ManifestFile), []byte(`{"recipe": "x", "artifacts": [{"path": "../etc"}]}`), 0o644)
		}, `artifact path "../etc"`},
		{"manifest.json is a directory", func(t *testing.T, dir string) { os.Mkdir(filepath.Join(dir, osimage.ManifestFile), 0o755) },
			"manifest.json is not a regular file"},
		{"a file", func(t *testing.T, dir string) { os.Remove(dir); os.WriteFile(dir, nil, 0o644) }, "is not a directory"},
		{"a symlink to an output", func(t *testing.T, dir string) {
			real := t.TempDir()
			writeEarlierOutput(t, real, "vmlinuz")
			os.Remove(dir)
			os.Symlink(real, dir)
		}, "is a symlink, not an earlier output of this builder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, dir)
			err := CheckOutputDir(dir)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckOutputDir = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrOutputNotOurs) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckOutputDir = %v, want ErrOutputNotOurs containing %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "output "+dir+": ") {
				t.Errorf("error does not start with the directory: %v", err)
			}
		})
	}
}

// TestBuildRefusesForeignOutput: `--output .` or `--output /srv` used to
// swap the directory out and delete what it held. Build must refuse before
// any step runs, and the files must survive.
func TestBuildRefusesForeignOutput(t *testing.T) {
	r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(t), "recipes/test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	keep := filepath.Join(out, "precious.txt")
	if err := os.WriteFile(keep, []byte("do not delete"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Without the check this build would run for minutes and then delete
	// precious.txt; an unreachable image source makes it fail at the
	// preflight instead, after the cache was opened.
	addUnreachableSource(t, r)
	cacheDir := filepath.Join(t.TempDir(), "cache")
	_, err = buildLane(context.Background(), r, Options{OutputDir: out, CacheDir: cacheDir, NoCache: true})
	if !errors.Is(err, ErrOutputNotOurs) {
		t.Fatalf("Build = %v, want ErrOutputNotOurs", err)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "do not delete" {
		t.Errorf("the file in the output directory did not survive: %q, %v", b, err)
	}
	if _, err := os.Stat(cacheDir); !os.IsNotExist(err) {
		t.Errorf("the refused build started (cache dir created): %v", err)
	}
}

// addUnreachableSource gives r an image source on a closed port, so that a
// build fails at the preflight, within a second.
func addUnreachableSource(t *testing.T, r *recipe.Recipe) {
	img := buildertest.ClosedPort(t) + "/osb/none@sha256:" + strings.Repeat("0", 64)
	r.Resolved[0].OCI = append(r.Resolved[0].OCI, recipe.OCISource{Image: img, Paths: map[string]string{"/a": "/a"}})
}

// TestOutputReplacement builds into an empty directory, then over that
// earlier output; a failed build after that leaves it as it was.
func TestOutputReplacement(t *testing.T) {
	buildertest.RequireTools(t, "mmdebstrap", "mksquashfs")
	if testing.Short() {
		t.Skip("builds an image")
	}
	out := t.TempDir() // empty
	cacheDir := cache.DefaultDir()
	build := func(broken bool, version string) error {
		r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(t), "recipes/test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if broken {
			addUnreachableSource(t, r)
		}
		// Another version: a build with nothing changed would write nothing.
		r.Version = version
		_, err = buildLane(context.Background(), r, Options{OutputDir: out, CacheDir: cacheDir})
		return err
	}
	state := func() (os.FileInfo, string) {
		info, err := os.Stat(out)
		if err != nil {
			t.Fatal(err)
		}
		m, err := os.ReadFile(filepath.Join(out, osimage.ManifestFile))
		if err != nil {
			t.Fatal(err)
		}
		return info, string(m)
	}

	if err := build(false, "0.1.0"); err != nil {
		t.Fatalf("build into an empty directory: %v", err)
	}
	first, _ := state()
	if err := build(false, "0.1.1"); err != nil {
		t.Fatalf("build over an earlier output: %v", err)
	}
	second, manifest := state()
	if os.SameFile(first, second) {
		t.Error("the earlier output was not replaced (same directory)")
	}
	if err := build(true, "0.1.2"); err == nil || errors.Is(err, ErrOutputNotOurs) {
		t.Fatalf("broken build = %v, want a preflight failure", err)
	}
	third, after := state()
	if !os.SameFile(second, third) || after != manifest {
		t.Error("a failed build changed the previous output")
	}
	if err := CheckOutputDir(out); err != nil {
		t.Errorf("a builder output is not recognised as one: %v", err)
	}
}

// FuzzOutputManifest: manifest.json of an existing output directory is
// outside bytes; whatever it holds, recognising it must not panic, and what
// it accepts names plain files only.
func FuzzOutputManifest(f *testing.F) {
	f.Add([]byte(`{"recipe":"test","artifacts":[{"kind":"kernel","path":"vmlinuz"}]}`))
	f.Add([]byte(`{"recipe":"x","artifacts":[{"path":"../etc"}]}`))
	f.Add([]byte(`{"name":"web"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		names, err := parseOutputManifest(data)
		if err != nil {
			return
		}
		for _, n := range names {
			if n == "" || n == "." || n == ".." || filepath.Base(n) != n || n == osimage.ManifestFile {
				t.Errorf("accepted artifact path %q", n)
			}
		}
	})
}
