package sources

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/internal/filehash"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/recipe"
)

// hello is a real program at a pinned version, which the tests that
// build it fetch through the module proxy.
var hello = recipe.GoBuild{
	Module:  "golang.org/x/example/hello",
	Version: "v0.0.0-20250915201037-7f05d217867b",
	Package: ".",
	Binary:  "/usr/bin/hello",
}

// TestGoBuildStep builds a real program from a pinned module version
// through the module proxy and runs it; two builds give the same bytes
// (-trimpath, no build ID), which is what lets the cache key on inputs.
func TestGoBuildStep(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches a module")
	}
	g := hello
	step := &GoBuild{g: g, arch: "amd64"}
	var sums []string
	for i := 0; i < 2; i++ {
		out := t.TempDir()
		if err := step.Run(context.Background(), out); err != nil {
			t.Fatal(err)
		}
		b, err := exec.Command(step.binaryPath(out), "-r", "os-builder").CombinedOutput()
		if err != nil {
			t.Fatalf("built program fails: %v\n%s", err, b)
		}
		if !strings.Contains(string(b), "redliub-so") {
			t.Errorf("built program printed %q", b)
		}
		d, err := filehash.SHA256(step.binaryPath(out))
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, d)
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds differ: %s vs %s", sums[0], sums[1])
	}
	in1, _ := step.Inputs()
	g.Version = "v0.0.0-20250101000000-000000000000"
	in2, _ := (&GoBuild{g: g, arch: "amd64"}).Inputs()
	if in1.Key() == in2.Key() {
		t.Error("another version gives the same cache key")
	}
}

// TestGoBuildStepUnknownVersion fails with the go command's reason.
func TestGoBuildStepUnknownVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("asks the module proxy")
	}
	step := &GoBuild{g: recipe.GoBuild{Module: "golang.org/x/example/hello", Version: "v9.9.9", Package: ".", Binary: "/usr/bin/hello"}, arch: "amd64"}
	err := step.Run(context.Background(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "v9.9.9") {
		t.Fatalf("err = %v, want one naming the version", err)
	}
}

// TestGoBuildKeyFollowsToolchainOnPath: the key names the go that will
// build (first on PATH), not the Go that compiled the builder.
func TestGoBuildKeyFollowsToolchainOnPath(t *testing.T) {
	real, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	step := &GoBuild{g: recipe.GoBuild{Module: "example.com/m", Version: "v1.0.0", Package: ".", Binary: "/usr/bin/m"}, arch: "amd64"}
	before, err := step.Inputs()
	if err != nil {
		t.Fatal(err)
	}
	// A go that reports another version, as a newer toolchain would.
	dir := t.TempDir()
	fake := "#!/bin/sh\n" + real + ` "$@" | sed 's/"go1\.[0-9.]*"/"go1.99.0"/'` + "\n"
	if err := os.WriteFile(filepath.Join(dir, "go"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	// A step takes its inputs once (for its build): the next build's step.
	after, err := (&GoBuild{g: step.g, arch: step.arch}).Inputs()
	if err != nil {
		t.Fatal(err)
	}
	if before.Key() == after.Key() {
		t.Fatal("another toolchain on PATH gives the same cache key")
	}
	if d := after.Diff(before); len(d) != 1 || d[0] != "go-env:GOVERSION" {
		t.Errorf("inputs changed: %v, want just go-env:GOVERSION", d)
	}
}

// TestGoBuildEnvironmentIsPinned: what the builder's environment says about
// code generation, the toolchain or the C compiler does not reach the go
// command, so neither the key nor the binary changes with it.
func TestGoBuildEnvironmentIsPinned(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches a module")
	}
	g := hello
	build := func(t *testing.T) (key, digest string) {
		step := &GoBuild{g: g, arch: "amd64"}
		in, err := step.Inputs()
		if err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		if err := step.Run(context.Background(), out); err != nil {
			t.Fatal(err)
		}
		d, err := filehash.SHA256(step.binaryPath(out))
		if err != nil {
			t.Fatal(err)
		}
		return in.Key(), d
	}
	wantKey, wantDigest := build(t)
	for _, env := range [][2]string{
		{"GOAMD64", "v3"},
		{"GOFLAGS", "-gcflags=all=-N"},
		{"GOEXPERIMENT", "arenas"},
		{"GOTOOLCHAIN", "go1.26.0"},
		{"CGO_ENABLED", "1"},
		{"CC", "/nonexistent/cc"},
	} {
		t.Run(env[0], func(t *testing.T) {
			t.Setenv(env[0], env[1])
			key, digest := build(t)
			if key != wantKey {
				t.Errorf("%s=%s changes the cache key", env[0], env[1])
			}
			if digest != wantDigest {
				t.Errorf("%s=%s changes the binary (%s, want %s) under the same key", env[0], env[1], digest, wantDigest)
			}
		})
	}
}

func TestGoBuildEnv(t *testing.T) {
	t.Setenv("GOAMD64", "v4")
	t.Setenv("CGO_LDFLAGS", "-lfoo")
	t.Setenv("GOPROXY", "https://proxy.example")
	env := map[string]string{}
	for _, kv := range goBuildEnv("arm64", false) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v // later values win, as for exec
	}
	for k, want := range map[string]string{
		"GOAMD64": "v1", "GOARCH": "arm64", "GOOS": "linux", "GOTOOLCHAIN": "local",
		"CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly", "GOPROXY": "https://proxy.example",
	} {
		if env[k] != want {
			t.Errorf("%s=%q, want %q", k, env[k], want)
		}
	}
	if v, ok := env["CGO_LDFLAGS"]; ok {
		t.Errorf("CGO_LDFLAGS=%q inherited", v)
	}
}

// TestGoBuildProgress: a go step reports packages compiled of the count
// go list gives, from go build -v, with the Go build cache out of play.
func TestGoBuildProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("fetches a module")
	}
	t.Setenv("GOCACHE", t.TempDir()) // cold: every package compiles
	step := NewGoBuild(hello, "amd64")
	var out testutil.SyncBuffer
	r := progress.New(&out, false, progress.ModeJSON)
	r.BeginStep("go:hello")
	if err := step.Run(progress.WithMeter(context.Background(), r, "go:hello"), t.TempDir()); err != nil {
		t.Fatal(err)
	}
	r.EndStep("go:hello", nil, 0)
	r.Close()
	var s progress.Event
	for _, line := range strings.Split(out.String(), "\n") {
		if err := json.Unmarshal([]byte(line), &s); err == nil && s.State == "done" {
			break
		}
	}
	if s.State != "done" || s.Unit != "packages" || s.Total < 10 || s.Done < s.Total/2 || s.Done > s.Total {
		t.Fatalf("progress %+v: want most of the go list -deps count compiled", s)
	}
	t.Logf("%d of %d packages", s.Done, s.Total)
}
