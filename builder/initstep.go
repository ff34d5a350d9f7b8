package builder

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/initrd"
)

const initStepVersion = "1"

// initStep writes the initrd's init (cmd/init) from src: the init the
// builder carries (its key: the init's bytes), or one built from the
// builder's source tree (its key: the source of the packages the init is
// built from, go.mod, go.sum and the toolchain) or from the module at the
// builder's own version (its key: that version and the toolchain). A warm
// build neither runs the Go compiler nor changes the initrd keys, and a
// builder that cannot get an init fails when the keys are made, before any
// long step.
type initStep struct {
	arch string
	src  InitSource // nil: initrd.SourceInit
	log  *Reporter
}

func (s *initStep) Name() string { return "init" }

func (s *initStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", initStepVersion)
	in.Add("arch", s.arch)
	if p, ok := s.src.(initrd.PrebuiltInits); ok {
		d, err := p.Digest(s.arch)
		if err != nil {
			return nil, err
		}
		in.AddDigest("prebuilt-init", d)
		return in, nil
	}
	src, srcErr := initrd.FindSourceDir()
	if srcErr != nil {
		version, err := initrd.OwnVersion()
		if err != nil || os.Getenv(initrd.SourceDirEnv) != "" {
			return nil, fmt.Errorf("%w: this builder carries none (use one from `make builder`) and cannot build one: %w; nor from the module at its own version: %w", initrd.ErrNoInit, srcErr, err)
		}
		in.Add("module", initrd.ModulePath+"@"+version)
		return s.addToolchain(in)
	}
	// The module's own packages the init imports, by go list: a package
	// added under initrd/ is part of the key the day it is imported.
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.ImportPath}}{{"\t"}}{{.Dir}}{{end}}{{end}}`, "./cmd/init")
	cmd.Dir = src
	cmd.Env = goBuildEnv(s.arch, false)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list ./cmd/init in %s: %w%s", src, err, stderrOf(err))
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
		d, err := digestFile(filepath.Join(src, f))
		if err != nil {
			return nil, err
		}
		in.AddDigest(f, d)
	}
	return s.addToolchain(in)
}

func (s *initStep) addToolchain(in cache.Inputs) (cache.Inputs, error) {
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
func initBinary(out string) string { return filepath.Join(out, "init") }

func (s *initStep) Run(ctx context.Context, out string) error {
	src := s.src
	if src == nil {
		src = initrd.SourceInit{}
	}
	from, err := src.WriteInit(ctx, initBinary(out), s.arch)
	if err != nil {
		return err
	}
	if s.log != nil {
		s.log.Infof("init: %s", from)
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
		d, err := digestFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		in.AddDigest(e.Name(), d)
	}
	return in.Key(), nil
}
