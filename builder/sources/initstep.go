package sources

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/programs"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/filehash"
	"github.com/ironcore-dev/os-builder/osimage"
)

const initStepVersion = "1"

// Init writes the initrd's init (cmd/init) from src: the init the
// builder carries (its key: the init's bytes), or one built from the
// builder's source tree (its key: the source of the packages the init is
// built from, go.mod, go.sum and the toolchain) or from the module at the
// builder's own version (its key: that version and the toolchain). A warm
// build neither runs the Go compiler nor changes the initrd keys, and a
// builder that cannot get an init fails when the keys are made, before any
// long step.
type Init struct {
	arch string
	src  programs.InitSource              // nil: programs.SourceInit
	logf func(format string, args ...any) // nil: silence
}

// NewInit is the step that writes the init for arch from src (nil: built
// from source); logf says where it came from.
func NewInit(arch string, src programs.InitSource, logf func(format string, args ...any)) *Init {
	return &Init{arch: arch, src: src, logf: logf}
}

func (s *Init) Name() string { return "init" }

func (s *Init) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", initStepVersion)
	in.Add("arch", s.arch)
	if p, ok := s.src.(programs.PrebuiltInits); ok {
		d, err := p.Digest(s.arch)
		if err != nil {
			return nil, err
		}
		in.AddDigest("prebuilt-init", d)
		return in, nil
	}
	src, srcErr := programs.FindSourceDir()
	if srcErr != nil {
		version, err := programs.OwnVersion()
		if err != nil || os.Getenv(programs.SourceDirEnv) != "" {
			return nil, fmt.Errorf("%w: this builder carries none (use one from `make builder`) and cannot build one: %w; nor from the module at its own version: %w", programs.ErrNoInit, srcErr, err)
		}
		in.Add("module", programs.ModulePath+"@"+version)
		return s.addToolchain(in)
	}
	// The module's own packages the init imports, by go list: a package
	// added under initrd/ is part of the key the day it is imported.
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.ImportPath}}{{"\t"}}{{.Dir}}{{end}}{{end}}`, "./cmd/init")
	cmd.Dir = src
	cmd.Env = goBuildEnv(s.arch, false)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list ./cmd/init in %s: %w%s", src, err, command.StderrOf(err))
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, dir, ok := strings.Cut(line, "\t")
		if !ok {
			return nil, fmt.Errorf("go list ./cmd/init: unexpected line %q", line)
		}
		d, err := digestPackageDir(dir)
		if err != nil {
			return nil, err
		}
		in.AddDigest("package:"+pkg, d)
	}
	for _, f := range []string{"go.mod", "go.sum"} {
		d, err := filehash.SHA256(filepath.Join(src, f))
		if err != nil {
			return nil, err
		}
		in.AddDigest(f, d)
	}
	return s.addToolchain(in)
}

func (s *Init) addToolchain(in cache.Inputs) (cache.Inputs, error) {
	tc, err := toolchainInputs(context.Background(), goBuildEnv(s.arch, false), false)
	if err != nil {
		return nil, err
	}
	for _, i := range tc {
		in.Add(i[0], i[1])
	}
	return in, nil
}

// initBinary is the init in the step's output.
// InitBinary is the init in the step's output out.
func InitBinary(out string) string { return filepath.Join(out, "init") }

func (s *Init) Run(ctx context.Context, out string) error {
	src := s.src
	if src == nil {
		src = programs.SourceInit{}
	}
	from, err := src.WriteProgram(ctx, programs.InitProgram, InitBinary(out), s.arch)
	if err != nil {
		return err
	}
	if s.logf != nil {
		s.logf("init: %s", from)
	}
	return nil
}

// digestPackageDir hashes a package directory's files, not its
// subdirectories (other packages, which go list names on their own).
func digestPackageDir(dir string) (string, error) {
	var in cache.Inputs
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		d, err := filehash.SHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		in.AddDigest(e.Name(), d)
	}
	return in.Key(), nil
}

// InitInfo describes the init at p for the manifest: enough to check that a
// rebuild used the same one.
func InitInfo(p string) (*osimage.InitInfo, error) {
	d, err := filehash.SHA256(p)
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	info := &osimage.InitInfo{SHA256: d}
	if bi, err := buildinfo.ReadFile(p); err == nil {
		info.GoVersion = bi.GoVersion
	}
	return info, nil
}
