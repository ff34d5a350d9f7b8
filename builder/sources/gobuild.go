package sources

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/recipe"
)

const goBuildVersion = "3"

// GoBuild builds one Go program from a pinned module version with
// `go build -trimpath`, inside the module as published: its own go.mod
// decides dependency versions (replace directives included) and its own
// go.sum checks every dependency download, as `go install pkg@version`
// would. The module itself is checked against the recipe's pinned sum, or
// the checksum database when none is pinned.
//
// The output depends on the toolchain and environment the go command runs
// with, not on the Go that compiled the builder: the step pins what it can
// (goBuildEnv) and keys on what the go command reports it will use
// (toolchainInputs).
type GoBuild struct {
	g    recipe.GoBuild
	arch string

	mu sync.Mutex
	in cache.Inputs // once taken: they ask the go command
}

// NewGoBuild is the step that builds g's program for arch.
func NewGoBuild(g recipe.GoBuild, arch string) *GoBuild { return &GoBuild{g: g, arch: arch} }

// Binaries is the program the step's output out holds, bound for its path
// in the root.
func (s *GoBuild) Binaries(out string) ([]step.Binary, error) {
	in, err := s.Inputs()
	if err != nil {
		return nil, err
	}
	return []step.Binary{{Src: s.binaryPath(out), Dest: s.g.Binary, Step: s.Name(), StepKey: in.Key()}}, nil
}

func (s *GoBuild) Name() string { return "go:" + s.g.Module + "@" + s.g.Version }

func (s *GoBuild) Inputs() (cache.Inputs, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.in != nil {
		return s.in, nil
	}
	var in cache.Inputs
	in.Add("step-version", goBuildVersion)
	in.Add("module", s.g.Module+"@"+s.g.Version)
	in.Add("sum", s.g.Sum)
	in.Add("package", s.g.Package)
	in.Add("cgo", strconv.FormatBool(s.g.CGO))
	in.Add("tags", strings.Join(s.g.Tags, ","))
	in.Add("ldflags", s.g.Ldflags)
	in.Add("arch", s.arch)
	tc, err := toolchainInputs(context.Background(), goBuildEnv(s.arch, s.g.CGO), s.g.CGO)
	if err != nil {
		return nil, err
	}
	for _, i := range tc {
		in.Add(i[0], i[1])
	}
	s.in = in
	return in, nil
}

// goStripped are variables that change what `go build` produces; the step
// does not inherit them. Those it needs it sets in goBuildEnv; the rest
// (and what a go env file may set) toolchainInputs keys on.
var goStripped = map[string]bool{
	"GOROOT": true, "GOTOOLCHAIN": true, "GOOS": true, "GOARCH": true, "GOFLAGS": true,
	"GOAMD64": true, "GOARM": true, "GOARM64": true, "GO386": true, "GOMIPS": true, "GOMIPS64": true,
	"GOPPC64": true, "GORISCV64": true, "GOWASM": true, "GOEXPERIMENT": true, "GODEBUG": true,
	"GOFIPS140": true, "GOWORK": true, "GO111MODULE": true, "GOCOVERDIR": true,
	"CGO_ENABLED": true, "CC": true, "CXX": true, "FC": true, "AR": true, "GCCGO": true,
	"PKG_CONFIG": true,
}

// goBuildEnv is the go command's environment: the builder's, minus what
// changes the output, plus the pinned values. GOTOOLCHAIN=local: the go on
// PATH builds, never one it would download for a module's toolchain line.
func goBuildEnv(arch string, cgo bool) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if goStripped[k] || strings.HasPrefix(k, "CGO_") {
			continue
		}
		env = append(env, kv)
	}
	cgoEnabled := "0"
	if cgo {
		cgoEnabled = "1"
	}
	return append(env, "GOTOOLCHAIN=local", "GOOS=linux", "GOARCH="+arch, "GOAMD64=v1", "GOARM64=v8.0",
		"CGO_ENABLED="+cgoEnabled, "GOWORK=off", "GO111MODULE=on", "GOFLAGS=-mod=readonly")
}

// goKeyVars are what toolchainInputs asks the go command about: with env
// pinned these are fixed except GOVERSION (the toolchain on PATH) and what a
// go env file ($GOENV) sets.
var goKeyVars = []string{"GOVERSION", "GOTOOLCHAIN", "GOOS", "GOARCH", "GOAMD64", "GOARM64",
	"GOEXPERIMENT", "GOFLAGS", "CGO_ENABLED"}

var cgoKeyVars = []string{"CC", "CXX", "CGO_CFLAGS", "CGO_CPPFLAGS", "CGO_CXXFLAGS", "CGO_FFLAGS", "CGO_LDFLAGS"}

// toolchainInputs asks the go command that will build (under env) which
// toolchain and settings it uses; with cgo, also the C compiler's version.
func toolchainInputs(ctx context.Context, env []string, cgo bool) ([][2]string, error) {
	vars := goKeyVars
	if cgo {
		vars = append(append([]string(nil), goKeyVars...), cgoKeyVars...)
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"env", "-json"}, vars...)...)
	cmd.Env = env
	cmd.Dir = os.TempDir() // outside any module
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w%s", err, command.StderrOf(err))
	}
	var got map[string]string
	if err := json.Unmarshal(b, &got); err != nil {
		return nil, fmt.Errorf("go env -json: %w", err)
	}
	if got["GOVERSION"] == "" {
		return nil, fmt.Errorf("go env: no GOVERSION in %q", command.Tail(string(b), 5))
	}
	var out [][2]string
	for _, v := range vars {
		out = append(out, [2]string{"go-env:" + v, got[v]})
	}
	if cgo {
		cc := strings.Fields(got["CC"])
		if len(cc) == 0 {
			return nil, fmt.Errorf("go env: CC is empty but the program needs cgo")
		}
		cmd := exec.CommandContext(ctx, cc[0], append(cc[1:], "--version")...)
		cmd.Env = env
		v, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("%s --version: %w%s", cc[0], err, command.StderrOf(err))
		}
		out = append(out, [2]string{"cc-version", string(v)})
	}
	return out, nil
}

// binaryPath is where the built program sits in the step's output.
func (s *GoBuild) binaryPath(out string) string {
	return filepath.Join(out, filepath.Base(s.g.Binary))
}

func (s *GoBuild) Run(ctx context.Context, out string) error {
	src, _, err := goModDownload(ctx, s.g.Module, s.g.Version, s.g.Sum, goBuildEnv(s.arch, s.g.CGO))
	if err != nil {
		return err
	}
	// The module cache is read-only; build in a copy.
	work, err := os.MkdirTemp("", "osb-gobuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := command.Run(ctx, "cp", "-r", src+"/.", work); err != nil {
		return err
	}
	if err := command.Run(ctx, "chmod", "-R", "u+w", work); err != nil {
		return err
	}
	args := []string{"build", "-mod=readonly", "-trimpath", "-buildvcs=false", "-o", s.binaryPath(out)}
	if len(s.g.Tags) > 0 {
		args = append(args, "-tags", strings.Join(s.g.Tags, ","))
	}
	args = append(args, "-ldflags", strings.TrimSpace("-buildid= "+s.g.Ldflags), s.g.Package)
	total := s.countPackages(ctx, work)
	// -v names each package as it is compiled: the progress.
	cmd := exec.CommandContext(ctx, "go", append(args[:1:1], append([]string{"-v"}, args[1:]...)...)...)
	cmd.Dir = work
	cmd.Env = goBuildEnv(s.arch, s.g.CGO)
	tool := progress.NewLineCounter(ctx, "packages", func(line string, done, tot *int64) {
		if line != "" && !strings.HasPrefix(line, "#") && !strings.Contains(line, " ") {
			*done++
		}
		*tot = total
	})
	cmd.Stdout, cmd.Stderr = tool, tool
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, command.Tail(tool.String(), 30))
	}
	return nil
}

// countPackages is how many packages the program is built from (go list
// -deps), for progress; 0 when go list fails (the build will say why).
func (s *GoBuild) countPackages(ctx context.Context, work string) int64 {
	args := []string{"list", "-mod=readonly", "-deps"}
	if len(s.g.Tags) > 0 {
		args = append(args, "-tags", strings.Join(s.g.Tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, s.g.Package)...)
	cmd.Dir = work
	cmd.Env = goBuildEnv(s.arch, s.g.CGO)
	b, err := cmd.Output()
	if err != nil {
		return 0
	}
	return int64(strings.Count(string(b), "\n"))
}

// goModDownload fetches module@version into the module cache and returns
// its directory and go.sum hash. With sum set, the download is checked
// against it (and not the checksum database, which may not know the
// module); without, the go command checks it as env says (GOSUMDB,
// GONOSUMDB, GOPRIVATE).
func goModDownload(ctx context.Context, module, version, sum string, env []string) (dir, gotSum string, err error) {
	ref := module + "@" + version
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", ref)
	cmd.Dir = os.TempDir() // outside any module
	cmd.Env = append(env, "GOFLAGS=-mod=mod")
	if sum != "" {
		// We check the pinned sum ourselves below.
		cmd.Env = append(cmd.Env, "GONOSUMDB="+module)
	}
	b, err := cmd.Output()
	var info struct{ Dir, Sum, Error string }
	_ = json.Unmarshal(b, &info)
	if err != nil || info.Error != "" {
		msg := info.Error
		if ee, ok := err.(*exec.ExitError); ok && msg == "" {
			msg = string(ee.Stderr)
		}
		if msg == "" && err != nil {
			msg = err.Error()
		}
		return "", "", fmt.Errorf("go mod download %s: %s", ref, strings.TrimSpace(msg))
	}
	if sum != "" && info.Sum != sum {
		return "", "", fmt.Errorf("module %s: downloaded sum %s, pinned %s", ref, info.Sum, sum)
	}
	if info.Sum == "" {
		return "", "", fmt.Errorf("go mod download %s: no sum reported", ref)
	}
	return info.Dir, info.Sum, nil
}
