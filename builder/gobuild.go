package builder

import (
	"context"
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

const goBuildVersion = "1"

// goBuildStep builds one Go program from a pinned module version with
// `go build -trimpath`, in a scratch module that requires it, so that the
// module's own requirements decide its dependency versions.
type goBuildStep struct {
	g     recipe.GoBuild
	arch  string
	cache string // GOMODCACHE/GOCACHE shared across builds
}

func (s *goBuildStep) Name() string { return "go:" + s.g.Module + "@" + s.g.Version }

func (s *goBuildStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", goBuildVersion)
	in.Add("module", s.g.Module+"@"+s.g.Version)
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
	work, err := os.MkdirTemp("", "osb-gobuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	pkg := s.g.Module
	if p := strings.TrimPrefix(strings.TrimPrefix(s.g.Package, "."), "/"); p != "" {
		pkg += "/" + p
	}
	cgo := "0"
	if s.g.CGO {
		cgo = "1"
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "CGO_ENABLED="+cgo, "GOOS=linux", "GOARCH="+s.arch, "GOWORK=off")
	steps := [][]string{
		{"mod", "init", "osb-build"},
		{"get", pkg + "@" + s.g.Version},
	}
	build := []string{"build", "-trimpath", "-buildvcs=false", "-o", s.binaryPath(out)}
	if len(s.g.Tags) > 0 {
		build = append(build, "-tags", strings.Join(s.g.Tags, ","))
	}
	ldflags := "-buildid= " + s.g.Ldflags
	build = append(build, "-ldflags", strings.TrimSpace(ldflags), pkg)
	steps = append(steps, build)
	for _, args := range steps {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = work
		cmd.Env = env
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(string(b), 30))
		}
	}
	return nil
}
