package artifacts

import (
	"debug/buildinfo"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/programs"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// TestGoPrograms reads the build info of a real Go binary (this test's own,
// standing for the init and a go step's program) the way manifest.json's goPrograms are made: main
// module, Go version and every linked module at the version the binary
// records (as `go version -m` shows it). Non-Go-step binaries are skipped;
// a file without build info fails, naming where it goes in the image.
func TestGoPrograms(t *testing.T) {
	self := filepath.Join(t.TempDir(), "init")
	_, err := programs.SourceInit{}.WriteProgram(t.Context(), programs.InitProgram, self, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	bi, err := buildinfo.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bins := []step.Binary{
		// A go step of this module: the binary says (devel), the
		// recipe's pin names the version.
		{Src: self, Dest: "/usr/bin/prog", Step: "go:github.com/ironcore-dev/os-builder@v9.9.9"},
		{Src: "/nonexistent", Dest: "/usr/bin/from-oci", Step: "oci:example.com/img@sha256:00"},
	}
	progs, err := GoPrograms(bins, self)
	if err != nil {
		t.Fatal(err)
	}
	if len(progs) != 2 || progs[0].Path != initPath || progs[1].Path != "/usr/bin/prog" {
		t.Fatalf("programs %+v, want /init and /usr/bin/prog", progs)
	}
	p := progs[1]
	if p.Main.Path != "github.com/ironcore-dev/os-builder" || p.Main.Version != "v9.9.9" || p.GoVersion != bi.GoVersion {
		t.Errorf("main %+v go %s, want this module at the pinned v9.9.9 built with %s", p.Main, p.GoVersion, bi.GoVersion)
	}
	if progs[0].Main.Version != bi.Main.Version {
		t.Errorf("init main version %q, binary says %q", progs[0].Main.Version, bi.Main.Version)
	}
	if len(p.Deps) != len(bi.Deps) || len(p.Deps) == 0 {
		t.Fatalf("%d deps, the binary links %d", len(p.Deps), len(bi.Deps))
	}
	want := map[string]osimage.GoModule{}
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		want[d.Path] = osimage.GoModule{Path: d.Path, Version: d.Version, Sum: d.Sum}
	}
	for _, d := range p.Deps {
		if want[d.Path] != d {
			t.Errorf("dep %+v, binary records %+v", d, want[d.Path])
		}
	}

	notGo := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = GoPrograms([]step.Binary{{Src: notGo, Dest: "/usr/bin/script", Step: "go:example.com/x@v1"}}, "")
	if err == nil || !strings.Contains(err.Error(), "/usr/bin/script") {
		t.Errorf("a binary without build info: err = %v, want one naming /usr/bin/script", err)
	}
}

func TestOCISources(t *testing.T) {
	r := &recipe.Recipe{}
	r.Resolved = []*recipe.Layer{
		{Name: "a"},
		{Name: "dp", OCI: []recipe.OCISource{{Image: "ghcr.io/x/dp:v1@sha256:" + strings.Repeat("a", 64), Paths: map[string]string{"/b": "/usr/bin/b", "/a": "/usr/bin/a"}}}},
	}
	got := OCISources(r)
	want := []osimage.OCISource{{Image: "ghcr.io/x/dp:v1@sha256:" + strings.Repeat("a", 64), Paths: []string{"/a", "/b"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ociSources = %+v, want %+v", got, want)
	}
}
