// Package programs supplies the static programs of this module that the
// builder puts into what it builds (the initrd's init, cmd/init; the
// foreign bootstrap's dpkg-deb, cmd/nativedpkg): carried prebuilt in the
// builder binary, or built with the go command from a source tree or from
// the module at the builder's own version.
package programs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
)

// ModulePath is this module's path; FindSourceDir looks for its go.mod.
const ModulePath = "github.com/ironcore-dev/os-builder"

// SourceDirEnv, when set, names the os-builder source tree to build the init
// from, for builders run outside of it.
const SourceDirEnv = "OSB_SOURCE_DIR"

// ErrNoInit: the builder neither carries an init nor can build one.
var ErrNoInit = errors.New("initrd: no init")

// InitSource supplies the static programs of this module the builder puts
// into what it builds, for an architecture: the initrd's init (cmd/init)
// and the bootstrap's native dpkg-deb (cmd/nativedpkg).
type InitSource interface {
	// WriteProgram writes program (one of Programs) for goarch to path
	// and says where it came from, for the build log.
	WriteProgram(ctx context.Context, program, path, goarch string) (from string, err error)
}

// Programs are the commands (cmd/NAME) an InitSource supplies: InitProgram
// and NativeDpkgProgram.
var Programs = []string{InitProgram, NativeDpkgProgram}

const (
	InitProgram       = "init"
	NativeDpkgProgram = "nativedpkg"
)

// PrebuiltInitName is the file name of the init for goarch in a
// PrebuiltInits tree.
func PrebuiltInitName(goarch string) string { return PrebuiltName(InitProgram, goarch) }

// PrebuiltName is the file name of program for goarch in a PrebuiltInits
// tree.
func PrebuiltName(program, goarch string) string { return program + "-linux-" + goarch }

// PrebuiltInits are inits compiled ahead of time (cmd/builder embeds those
// `make builder` built): FS holds PrebuiltInitName(goarch) for each
// architecture. The builder then needs neither Go nor a source tree.
type PrebuiltInits struct {
	FS fs.FS
	// From names the inits in the build log, e.g. "embedded in the builder".
	From string
}

func (p PrebuiltInits) WriteProgram(_ context.Context, program, path, goarch string) (string, error) {
	b, err := fs.ReadFile(p.FS, PrebuiltName(program, goarch))
	if err != nil {
		return "", fmt.Errorf("initrd: %s for %s %s: %w", program, goarch, p.From, err)
	}
	if err := os.WriteFile(path, b, 0o755); err != nil {
		return "", fmt.Errorf("initrd: %w", err)
	}
	return p.From, nil
}

// Digest is the sha256 (hex) of the init for goarch.
func (p PrebuiltInits) Digest(goarch string) (string, error) {
	b, err := fs.ReadFile(p.FS, PrebuiltInitName(goarch))
	if err != nil {
		return "", fmt.Errorf("initrd: init for %s %s: %w", goarch, p.From, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// SourceInit builds the init with the go command: in the source tree the
// builder runs in (FindSourceDir), else from this module at the version the
// running program was built with (a builder from `go install
// github.com/ironcore-dev/os-builder/cmd/builder@VERSION`), downloaded
// through the module proxy.
type SourceInit struct{}

func (SourceInit) WriteProgram(ctx context.Context, program, path, goarch string) (string, error) {
	src, srcErr := FindSourceDir()
	if srcErr == nil {
		return "built from " + src, buildProgram(ctx, src, program, path, goarch)
	}
	if os.Getenv(SourceDirEnv) != "" {
		return "", srcErr // asked for a tree that is not one: say so
	}
	version, err := OwnVersion()
	if err == nil {
		err = buildModuleProgram(ctx, version, program, path, goarch)
	}
	if err != nil {
		return "", fmt.Errorf("%w: this builder carries none (use one from `make builder`) and cannot build one: %w; nor from the module at its own version: %w", ErrNoInit, srcErr, err)
	}
	return "built from " + ModulePath + "@" + version, nil
}

// OwnVersion is the version of this module the running program was built
// with, if it is one the module proxy can serve.
func OwnVersion() (string, error) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", errors.New("the program carries no build information")
	}
	return moduleVersion(bi)
}

// moduleVersion is this module's version in bi, whether it is the main
// module (cmd/builder) or a dependency (a program using the library).
func moduleVersion(bi *debug.BuildInfo) (string, error) {
	mods := append([]*debug.Module{&bi.Main}, bi.Deps...)
	for _, m := range mods {
		if m.Path != ModulePath {
			continue
		}
		switch {
		case m.Replace != nil:
			return "", fmt.Errorf("%s is replaced by %s", ModulePath, m.Replace.Path)
		case m.Version == "" || m.Version == "(devel)" || strings.HasSuffix(m.Version, "+dirty"):
			return "", fmt.Errorf("%s has version %q", ModulePath, m.Version)
		}
		return m.Version, nil
	}
	return "", fmt.Errorf("the program does not link %s", ModulePath)
}

// FindSourceDir returns the root of the os-builder source tree: $OSB_SOURCE_DIR,
// or the first directory from the working directory upwards whose go.mod
// declares ModulePath.
func FindSourceDir() (string, error) {
	if d := os.Getenv(SourceDirEnv); d != "" {
		if !isModuleRoot(d) {
			return "", fmt.Errorf("initrd: $%s=%s holds no go.mod for %s", SourceDirEnv, d, ModulePath)
		}
		return d, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("initrd: %w", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isModuleRoot(d) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("initrd: no go.mod for %s in %s or above (run inside the source tree or set $%s)", ModulePath, wd, SourceDirEnv)
		}
	}
}

func isModuleRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == ModulePath
		}
	}
	return false
}

// BuildInitBinary builds cmd/init of the source tree FindSourceDir finds as
// a static binary for goarch ("" means amd64) into outPath.
func BuildInitBinary(ctx context.Context, outPath, goarch string) error {
	src, err := FindSourceDir()
	if err != nil {
		return err
	}
	return buildProgram(ctx, src, InitProgram, outPath, goarch)
}

// BuildProgram builds one of Programs from the source tree (FindSourceDir)
// for goarch into outPath, as BuildInitBinary builds the init.
func BuildProgram(ctx context.Context, program, outPath, goarch string) error {
	src, err := FindSourceDir()
	if err != nil {
		return err
	}
	return buildProgram(ctx, src, program, outPath, goarch)
}

// BuildModuleInit builds cmd/init of this module at version, fetched with
// `go mod download` (through $GOPROXY, checked against go.sum's database),
// with the same flags as a source tree build: the same version gives the
// same bytes either way.
func BuildModuleInit(ctx context.Context, version, outPath, goarch string) error {
	return buildModuleProgram(ctx, version, InitProgram, outPath, goarch)
}

func buildModuleProgram(ctx context.Context, version, program, outPath, goarch string) error {
	ref := ModulePath + "@" + version
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", ref)
	cmd.Dir = os.TempDir() // outside any module
	cmd.Env = append(initBuildEnv(goarch), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	_ = json.Unmarshal(out, &info)
	if err != nil || info.Error != "" || info.Dir == "" {
		msg := info.Error
		var ee *exec.ExitError
		if msg == "" && errors.As(err, &ee) {
			msg = string(ee.Stderr)
		}
		if msg == "" && err != nil {
			msg = err.Error()
		}
		return fmt.Errorf("initrd: go mod download %s: %s", ref, strings.TrimSpace(msg))
	}
	// The module cache is read-only and go build may want to write go.sum
	// updates next to go.mod: build in a copy.
	work, err := os.MkdirTemp("", "osb-init-")
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	defer os.RemoveAll(work)
	if err := os.CopyFS(work, os.DirFS(info.Dir)); err != nil {
		return fmt.Errorf("initrd: copy %s: %w", info.Dir, err)
	}
	return buildProgram(ctx, work, program, outPath, goarch)
}

// initBuildEnv is the environment of the init's go build: the caller's,
// with what changes the output pinned.
func initBuildEnv(goarch string) []string {
	return append(os.Environ(),
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch,
		"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=", "GOEXPERIMENT=",
	)
}

// buildProgram builds src's cmd/PROGRAM for goarch ("" means amd64) into
// outPath. The build is reproducible: no cgo, -trimpath, no build id, no VCS stamp
// (so unrelated commits do not change the initrd's bytes), and a fixed
// GOAMD64 level rather than whatever the environment says.
func buildProgram(ctx context.Context, src, program, outPath, goarch string) error {
	if goarch == "" {
		goarch = "amd64"
	}
	out, err := filepath.Abs(outPath)
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags=-s -w -buildid=", "-o", out, "./cmd/"+program)
	cmd.Dir = src
	cmd.Env = initBuildEnv(goarch)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("initrd: go build ./cmd/%s in %s: %w\n%s", program, src, err, stderr.String())
	}
	return nil
}
