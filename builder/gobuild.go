package builder

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/recipe"
)

const goBuildVersion = "2"

// goBuildStep builds one Go program from a pinned module version with
// `go build -trimpath`, inside the module as published: its own go.mod
// decides dependency versions (replace directives included) and its own
// go.sum checks every dependency download, as `go install pkg@version`
// would. The module itself is checked against the recipe's pinned sum, or
// the checksum database when none is pinned.
type goBuildStep struct {
	g    recipe.GoBuild
	arch string
}

func (s *goBuildStep) Name() string { return "go:" + s.g.Module + "@" + s.g.Version }

func (s *goBuildStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", goBuildVersion)
	in.Add("module", s.g.Module+"@"+s.g.Version)
	in.Add("sum", s.g.Sum)
	in.Add("package", s.g.Package)
	in.Add("cgo", strconv.FormatBool(s.g.CGO))
	in.Add("tags", strings.Join(s.g.Tags, ","))
	in.Add("ldflags", s.g.Ldflags)
	in.Add("go", runtime.Version())
	in.Add("arch", s.arch)
	return in, nil
}

// binaryPath is where the built program sits in the step's output.
func (s *goBuildStep) binaryPath(out string) string {
	return filepath.Join(out, filepath.Base(s.g.Binary))
}

func (s *goBuildStep) Run(ctx context.Context, out string) error {
	src, err := s.download(ctx)
	if err != nil {
		return err
	}
	// The module cache is read-only; build in a copy.
	work, err := os.MkdirTemp("", "osb-gobuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := run(ctx, "cp", "-r", src+"/.", work); err != nil {
		return err
	}
	if err := run(ctx, "chmod", "-R", "u+w", work); err != nil {
		return err
	}
	cgo := "0"
	if s.g.CGO {
		cgo = "1"
	}
	args := []string{"build", "-mod=readonly", "-trimpath", "-buildvcs=false", "-o", s.binaryPath(out)}
	if len(s.g.Tags) > 0 {
		args = append(args, "-tags", strings.Join(s.g.Tags, ","))
	}
	args = append(args, "-ldflags", strings.TrimSpace("-buildid= "+s.g.Ldflags), s.g.Package)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo, "GOOS=linux", "GOARCH="+s.arch, "GOWORK=off", "GOFLAGS=-mod=readonly")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(string(b), 30))
	}
	return nil
}

// download fetches the module into the module cache, checks it and
// returns its directory.
func (s *goBuildStep) download(ctx context.Context) (string, error) {
	ref := s.g.Module + "@" + s.g.Version
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", ref)
	cmd.Dir = os.TempDir() // outside any module
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	if s.g.Sum != "" {
		// We check the pinned sum ourselves below.
		cmd.Env = append(cmd.Env, "GONOSUMDB="+s.g.Module)
	}
	b, err := cmd.Output()
	var info struct{ Dir, Sum, Error string }
	_ = json.Unmarshal(b, &info)
	if err != nil || info.Error != "" {
		msg := info.Error
		if ee, ok := err.(*exec.ExitError); ok && msg == "" {
			msg = string(ee.Stderr)
		}
		return "", fmt.Errorf("go mod download %s: %s", ref, strings.TrimSpace(msg))
	}
	if s.g.Sum != "" && info.Sum != s.g.Sum {
		return "", fmt.Errorf("module %s: downloaded sum %s, recipe pins %s", ref, info.Sum, s.g.Sum)
	}
	return info.Dir, nil
}
