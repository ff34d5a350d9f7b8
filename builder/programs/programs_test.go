package programs

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

func TestPrebuiltInits(t *testing.T) {
	src := PrebuiltInits{FS: fstest.MapFS{
		"init-linux-amd64": {Data: []byte("\x7fELF amd64")},
	}, From: "carried"}
	out := filepath.Join(t.TempDir(), "init")
	from, err := src.WriteProgram(context.Background(), InitProgram, out, "amd64")
	if err != nil || from != "carried" {
		t.Fatalf("WriteProgram(init) = %q, %v", from, err)
	}
	if b, _ := os.ReadFile(out); string(b) != "\x7fELF amd64" {
		t.Errorf("wrote %q", b)
	}
	if fi, _ := os.Stat(out); fi == nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", fi)
	}
	_, err = src.WriteProgram(context.Background(), InitProgram, out, "arm64")
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "arm64") {
		t.Errorf("missing arch: %v", err)
	}
}

func TestModuleVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bi      debug.BuildInfo
		want    string
		wantErr string
	}{
		{"go install", debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "v0.4.0"}}, "v0.4.0", ""},
		{"library user", debug.BuildInfo{Main: debug.Module{Path: "example.com/x", Version: "v1.0.0"},
			Deps: []*debug.Module{{Path: ModulePath, Version: "v0.3.1-0.20260101000000-abcdefabcdef"}}}, "v0.3.1-0.20260101000000-abcdefabcdef", ""},
		{"checkout build", debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "(devel)"}}, "", `version "(devel)"`},
		{"dirty tree", debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "v0.4.1-0.20260101000000-abcdefabcdef+dirty"}}, "", "+dirty"},
		{"replaced", debug.BuildInfo{Main: debug.Module{Path: "example.com/x"},
			Deps: []*debug.Module{{Path: ModulePath, Version: "v0.4.0", Replace: &debug.Module{Path: "../os-builder"}}}}, "", "replaced by ../os-builder"},
		{"not linked", debug.BuildInfo{Main: debug.Module{Path: "example.com/x"}}, "", "does not link"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := moduleVersion(&tc.bi)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("moduleVersion = %q, %v; want error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("moduleVersion = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestSourceInitOutsideTree: a builder carrying no init, run outside the
// source tree at no published version, says what to do instead.
func TestSourceInitOutsideTree(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv(SourceDirEnv, "")
	_, err := SourceInit{}.WriteProgram(context.Background(), InitProgram, filepath.Join(t.TempDir(), "init"), "amd64")
	if !errors.Is(err, ErrNoInit) {
		t.Fatalf("err = %v, want ErrNoInit", err)
	}
	for _, want := range []string{"make builder", SourceDirEnv, `"(devel)"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}

	t.Setenv(SourceDirEnv, t.TempDir())
	if _, err = (SourceInit{}).WriteProgram(context.Background(), InitProgram, filepath.Join(t.TempDir(), "init"), "amd64"); err == nil || !strings.Contains(err.Error(), "holds no go.mod") {
		t.Errorf("bad $%s: %v", SourceDirEnv, err)
	}
}

// TestBuildModuleInit builds the init the way a `go install`ed builder does
// (from this module at its version, through the module proxy) and expects
// the bytes of a source tree build. The proxy is a file:// one holding this
// tree as a pseudo-version; every other module comes from the local module
// cache's download directory, so the test needs no network and leaves the
// shared module cache alone.
func TestBuildModuleInit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the init twice")
	}
	gobin := testutil.RequireTool(t, "go")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	src, err := FindSourceDir()
	if err != nil {
		t.Fatal(err)
	}
	modcache, err := exec.Command(gobin, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	const version = "v0.0.0-20250101000000-0123456789ab"
	proxy := t.TempDir()
	writeModuleProxy(t, proxy, src, version)
	t.Setenv("GOPROXY", "file://"+proxy+",file://"+filepath.Join(strings.TrimSpace(string(modcache)), "cache", "download"))
	t.Setenv("GONOSUMDB", ModulePath) // the test version is in no checksum database
	t.Setenv("GOMODCACHE", t.TempDir())
	t.Setenv("GOFLAGS", "-modcacherw") // so that the temp dir can go
	t.Setenv("GOTOOLCHAIN", "local")

	dir := t.TempDir()
	fromTree, fromModule := filepath.Join(dir, "tree"), filepath.Join(dir, "module")
	if err := BuildInitBinary(ctx, fromTree, "amd64"); err != nil {
		t.Fatal(err)
	}
	if err := BuildModuleInit(ctx, version, fromModule, "amd64"); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(testutil.ReadFile(t, fromTree), testutil.ReadFile(t, fromModule)) {
		t.Errorf("init from %s@%s differs from the source tree's", ModulePath, version)
	}

	err = BuildModuleInit(ctx, "v0.0.0-20250101000000-ba9876543210", filepath.Join(dir, "none"), "amd64")
	if err == nil || !strings.Contains(err.Error(), "go mod download "+ModulePath+"@v0.0.0-20250101000000-ba9876543210") {
		t.Errorf("unknown version: %v", err)
	}
}

// writeModuleProxy lays out a GOPROXY file tree serving the module in tree
// at version: the files a module zip holds (no .git, no nested modules, no
// build outputs).
func writeModuleProxy(t *testing.T, proxy, tree, version string) {
	t.Helper()
	dir := filepath.Join(proxy, ModulePath, "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tree, p)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if strings.HasPrefix(d.Name(), ".") || rel == "out" || rel == "bin" {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		w, err := zw.Create(ModulePath + "@" + version + "/" + filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, dir, version+".zip", buf.Bytes())
	testutil.WriteFile(t, dir, version+".mod", testutil.ReadFile(t, filepath.Join(tree, "go.mod")))
	testutil.WriteFile(t, dir, version+".info", []byte(`{"Version":"`+version+`","Time":"2025-01-01T00:00:00Z"}`))
	testutil.WriteFile(t, dir, "list", []byte(version+"\n"))
}

// TestBuildInitBinary builds the real init twice into different places and
// expects the same bytes: a static, stripped executable.
func TestBuildInitBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the init")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "sub", "b")
	os.MkdirAll(filepath.Dir(b), 0o755)
	for _, p := range []string{a, b} {
		if err := BuildInitBinary(ctx, p, ""); err != nil {
			t.Fatal(err)
		}
	}
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Error("two builds differ")
	}
	// net/http and crypto/tls (for fetching images) are most of it.
	if len(ab) > 8<<20 {
		t.Errorf("init is %d bytes; expected a small stripped binary", len(ab))
	}
	if out, err := exec.Command("file", a).Output(); err == nil {
		s := string(out)
		if !strings.Contains(s, "statically linked") || !strings.Contains(s, "stripped") || strings.Contains(s, "not stripped") {
			t.Errorf("file(1): %s", s)
		}
	}
}
