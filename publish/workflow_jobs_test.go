package publish_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"go.yaml.in/yaml/v3"

	"github.com/ironcore-dev/os-builder/cache"
	cacheremote "github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
	"github.com/ironcore-dev/os-builder/publish"
	"github.com/ironcore-dev/os-builder/uki"
)

// actionsWorkflow is the part of the workflow a job runner needs.
type actionsWorkflow struct {
	Jobs map[string]actionsJob `yaml:"jobs"`
}

type actionsJob struct {
	Needs    yaml.Node         `yaml:"needs"`
	Env      map[string]string `yaml:"env"`
	Outputs  map[string]string `yaml:"outputs"`
	Strategy struct {
		Matrix struct {
			Include []map[string]string `yaml:"include"`
		} `yaml:"matrix"`
	} `yaml:"strategy"`
	Steps []actionsStep `yaml:"steps"`
}

type actionsStep struct {
	ID   string            `yaml:"id"`
	Name string            `yaml:"name"`
	If   string            `yaml:"if"`
	Uses string            `yaml:"uses"`
	Run  string            `yaml:"run"`
	Env  map[string]string `yaml:"env"`
}

// runnerSetupSteps are the run steps that prepare a fresh runner and that
// this machine has done already: packages (make setup), and bin/builder,
// which the test builds once and links into each job's workspace. "Host
// packages" also points OSB_CACHE_DIR at the workspace, a cold cache on a
// fresh runner; the test keeps the shared default cache, warm from `make
// test-image`, so the builds cost seconds, not an emulated bootstrap.
var runnerSetupSteps = []string{"Install git", "Host packages", "Builder"}

// expressions replaces every ${{ EXPR }} with its value in ctx; an
// expression the test does not know fails the test, so a new one in the
// workflow is not silently run as an empty string.
func expressions(t *testing.T, s string, ctx map[string]string) string {
	t.Helper()
	return regexp.MustCompile(`\$\{\{\s*([^}]*?)\s*\}\}`).ReplaceAllStringFunc(s, func(m string) string {
		expr := regexp.MustCompile(`^\$\{\{\s*|\s*\}\}$`).ReplaceAllString(m, "")
		v, ok := ctx[expr]
		if !ok {
			t.Fatalf("%s: expression %q: the job runner of this test does not know it", workflowFile, m)
		}
		return v
	})
}

// jobRun is one run of a workflow job on this machine.
type jobRun struct {
	name      string
	job       actionsJob
	ctx       map[string]string // ${{ }} values: github.*, matrix.*, secrets.*
	registry  string            // host:port standing for ghcr.io
	workspace string            // $GITHUB_WORKSPACE, the job's checkout
	extraEnv  []string          // what the test adds: which recipe to publish
}

// newWorkspace is a job's checkout: every top-level entry of this tree
// (symlinked, so the recipes and scripts are the ones under test) but bin/
// and out/, and bin/builder the builder built for this test run.
func newWorkspace(t *testing.T, builder string) string {
	t.Helper()
	ws := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "bin" || e.Name() == "out" || e.Name() == ".git" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(ws, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(ws, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(builder, filepath.Join(ws, "bin", "builder")); err != nil {
		t.Fatal(err)
	}
	return ws
}

// runnerEnv is the environment a step starts from: this process's, minus
// anything the workflow's jobs decide themselves.
func runnerEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PUBLISH_") || strings.HasPrefix(k, "OS_IMAGES_") || strings.HasPrefix(k, "GITHUB_") ||
			slices.Contains([]string{"OSB_CACHE_REPO", "BUILD_FLAGS", "BUILDER", "OUT_DIR", "GIT_SHA", "GIT_REF", "SOURCE_REPO", "BUILDER_ID", "DOCKER_CONFIG", "DRY_RUN", "RUNNER_TEMP"}, k) {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// run runs the job's run steps in order the way the runner does: bash
// -eo pipefail in $GITHUB_WORKSPACE, the job's env, then the step's, then
// what earlier steps wrote to $GITHUB_ENV; after a failure only steps with
// if: always() run. Steps that use an action are the runner's (checkout
// is the workspace, setup-go this test's Go). It returns the log, the
// job's outputs (its outputs: evaluated over what steps with an id wrote
// to $GITHUB_OUTPUT; an output no step set is empty, and left out, as on
// GitHub) and the first failure.
func (j jobRun) run(t *testing.T) (string, map[string]string, error) {
	t.Helper()
	var log strings.Builder
	runnerTemp := filepath.Join(j.workspace, ".runner-temp")
	if err := os.MkdirAll(runnerTemp, 0o755); err != nil {
		return "", nil, err
	}
	githubEnv := filepath.Join(runnerTemp, "github_env")
	if err := os.WriteFile(githubEnv, nil, 0o644); err != nil {
		return "", nil, err
	}
	stepOutputs := map[string]string{} // steps.ID.outputs.NAME -> value
	// ghcr.io is this test's registry: images and the step cache alike.
	value := func(v string) string {
		return strings.ReplaceAll(expressions(t, v, j.ctx), "ghcr.io/", j.registry+"/")
	}
	jobEnv := []string{"GITHUB_WORKSPACE=" + j.workspace, "RUNNER_TEMP=" + runnerTemp, "GITHUB_ENV=" + githubEnv, "CI=true"}
	for k, v := range j.job.Env {
		jobEnv = append(jobEnv, k+"="+value(v))
	}
	var failed error
	for _, st := range j.job.Steps {
		if st.Run == "" || slices.Contains(runnerSetupSteps, st.Name) {
			continue
		}
		if failed != nil && !strings.Contains(st.If, "always()") {
			continue
		}
		env := append(append(runnerEnv(), jobEnv...), j.extraEnv...)
		for k, v := range st.Env {
			env = append(env, k+"="+value(v))
		}
		written, err := readGitHubEnv(githubEnv)
		if err != nil {
			return log.String(), nil, fmt.Errorf("%s: $GITHUB_ENV: %w", j.name, err)
		}
		env = append(env, written...)
		githubOutput := filepath.Join(runnerTemp, fmt.Sprintf("github_output_%d", len(stepOutputs)))
		if err := os.WriteFile(githubOutput, nil, 0o644); err != nil {
			return log.String(), nil, err
		}
		env = append(env, "GITHUB_OUTPUT="+githubOutput)
		cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", value(st.Run))
		cmd.Dir, cmd.Env = j.workspace, env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(&log, "== %s / %s (%s)\n%s", j.name, st.Name, time.Since(start).Round(time.Millisecond), out)
		if err != nil && failed == nil {
			failed = fmt.Errorf("%s: step %q: %w", j.name, st.Name, err)
		}
		set, err := readGitHubEnv(githubOutput)
		if err != nil {
			return log.String(), nil, fmt.Errorf("%s: step %q: $GITHUB_OUTPUT: %w", j.name, st.Name, err)
		}
		for _, kv := range set {
			k, v, _ := strings.Cut(kv, "=")
			if st.ID == "" {
				return log.String(), nil, fmt.Errorf("%s: step %q writes output %s but has no id", j.name, st.Name, k)
			}
			stepOutputs["steps."+st.ID+".outputs."+k] = v
		}
	}
	outputs := map[string]string{}
	for name, expr := range j.job.Outputs {
		ctx := maps(j.ctx)
		for _, m := range regexp.MustCompile(`steps\.[\w-]+\.outputs\.[\w-]+`).FindAllString(expr, -1) {
			ctx[m] = stepOutputs[m]
		}
		if v := expressions(t, expr, ctx); v != "" {
			outputs[name] = v
		}
	}
	return log.String(), outputs, failed
}

// readGitHubEnv reads the NAME=value lines steps appended to $GITHUB_ENV
// (the multi-line NAME<<EOF form is not used by the workflow and refused).
func readGitHubEnv(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var env []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		if k, _, ok := strings.Cut(line, "="); !ok || strings.Contains(k, "<<") {
			return nil, fmt.Errorf("line %q: want NAME=value", line)
		}
		env = append(env, line)
	}
	return env, sc.Err()
}

// readActionsWorkflow parses the workflow and finds its architecture job
// (env PUBLISH_ARCH) and its joining job (env PUBLISH_JOIN).
func readActionsWorkflow(t *testing.T) (wf actionsWorkflow, buildJob, indexJob string) {
	t.Helper()
	raw, err := os.ReadFile(workflowFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("%s: %v", workflowFile, err)
	}
	for name, job := range wf.Jobs {
		if _, ok := job.Env["PUBLISH_ARCH"]; ok {
			buildJob = name
		}
		if _, ok := job.Env["PUBLISH_JOIN"]; ok {
			indexJob = name
		}
		for _, step := range runnerSetupSteps {
			if _, ok := job.Env["PUBLISH_JOIN"]; ok && step == "Host packages" {
				continue // the joining job builds nothing
			}
			if !slices.ContainsFunc(job.Steps, func(s actionsStep) bool { return s.Name == step }) {
				t.Errorf("job %s has no step %q: the runner setup the job runner of this test skips changed", name, step)
			}
		}
	}
	if buildJob == "" || indexJob == "" {
		t.Fatalf("%s: architecture job %q, joining job %q: want both", workflowFile, buildJob, indexJob)
	}
	return wf, buildJob, indexJob
}

// githubContext is what the test's runner knows of ${{ }}: a push to main.
func githubContext(t *testing.T, keys string) map[string]string {
	t.Helper()
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(keys, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	return map[string]string{
		"github.repository_owner":     "ironcore-dev",
		"github.repository":           "ironcore-dev/os-builder",
		"github.server_url":           "https://github.com",
		"github.sha":                  "0123456789abcdef0123456789abcdef01234567",
		"github.ref":                  "refs/heads/main",
		"github.run_id":               "20",
		"github.actor":                "osb-test",
		"secrets.GITHUB_TOKEN":        "not-a-token",
		"secrets.SECURE_BOOT_DB_KEY":  read(uki.KeyFile),
		"secrets.SECURE_BOOT_DB_CERT": read(uki.CertFile),
		"secrets.OSB_CACHE_SIGN_KEY":  read(filepath.Join("cache", uki.KeyFile)),
		"secrets.OSB_CACHE_SIGN_CERT": read(filepath.Join("cache", uki.CertFile)),
	}
}

// TestWorkflowJobsEndToEnd runs the workflow's jobs on this machine the
// way the runner runs them (issues 20 and 21): their env and run steps
// are read from .github/workflows/os-images.yml, ${{ }} filled in for a
// push to main, ghcr.io replaced by a docker-registry, each job in a
// workspace of its own. The build job runs once per matrix architecture,
// both at once as on two runners: real builds of recipes/test-multiarch.yaml
// (PUBLISH_RECIPES, the one variable the test adds; the workflow publishes
// the hypervisor, TestWorkflowPublishesHypervisor), signed with the key
// the step writes from its secrets, steps pushed to the registry cache
// ($OSB_CACHE_REPO), each handing on the digest it pushed (job outputs).
// Then, after the arm64 stage tag was moved to another image, the index
// job joins them: by those digests, so the move changes nothing (finding
// 5 of issue 27). The joined index is
// read as IronCore reads it: ironcore-image v0.5.0 pulls it per platform
// and boot-operator's resolution (first manifest whose
// platform.architecture matches) finds that architecture's kernel and
// initrd; each kernel is checked by its own magic (x86 bzImage "HdrS" at
// 0x202, arm64 Image "ARM\x64" at 56).
func TestWorkflowJobsEndToEnd(t *testing.T) {
	t.Parallel()
	host := requireRegistry(t)
	wf, buildJob, indexJob := readActionsWorkflow(t)
	keys := filepath.Join(t.TempDir(), "keys")
	if err := uki.GenerateKey(keys, "workflow jobs test"); err != nil {
		t.Fatal(err)
	}
	if err := uki.GenerateKey(filepath.Join(keys, "cache"), "workflow jobs test cache"); err != nil {
		t.Fatal(err)
	}
	gh := githubContext(t, keys)
	bin := releaseBuilderBinary(t)
	recipeEnv := []string{"PUBLISH_RECIPES=recipes/test-multiarch.yaml"}

	// The build job, once per matrix entry, side by side.
	type built struct {
		workspace string
		log       string
		outputs   map[string]string
		err       error
		took      time.Duration
	}
	matrix := wf.Jobs[buildJob].Strategy.Matrix.Include
	results := make([]built, len(matrix))
	var wg sync.WaitGroup
	start := time.Now()
	for i, m := range matrix {
		ctx := maps(gh)
		for k, v := range m {
			ctx["matrix."+k] = v
		}
		j := jobRun{name: buildJob + " (" + m["arch"] + ")", job: wf.Jobs[buildJob], ctx: ctx, registry: host,
			workspace: newWorkspace(t, bin), extraEnv: recipeEnv}
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := time.Now()
			log, outputs, err := j.run(t)
			results[i] = built{j.workspace, log, outputs, err, time.Since(s)}
		}()
	}
	wg.Wait()
	t.Logf("build jobs (%d architectures side by side): %s", len(matrix), time.Since(start).Round(time.Millisecond))
	outputs := map[string]*osimage.BuildManifest{} // arch -> its build's manifest
	for i, r := range results {
		arch := matrix[i]["arch"]
		t.Logf("build (%s): %s\n%s", arch, r.took.Round(time.Millisecond), r.log)
		if r.err != nil {
			t.Fatal(r.err)
		}
		m, err := osimage.ReadManifest(filepath.Join(r.workspace, "out", "publish", "test"))
		if err != nil {
			t.Fatalf("build (%s): %v", arch, err)
		}
		if m.Architecture != arch {
			t.Errorf("build (%s) built %s", arch, m.Architecture)
		}
		outputs[arch] = m
		for _, want := range []string{"--arch " + arch, "--sign-key", "--locked"} {
			if !strings.Contains(r.log, want) {
				t.Errorf("build (%s): the build was not run with %s:\n%s", arch, want, r.log)
			}
		}
	}
	if len(outputs) != 2 || outputs["amd64"] == nil || outputs["arm64"] == nil {
		t.Fatalf("built %d architectures, want amd64 and arm64", len(outputs))
	}
	// Both jobs pushed their steps to the registry cache.
	cacheRepo := strings.ReplaceAll(expressions(t, wf.Jobs[buildJob].Env["OSB_CACHE_REPO"], gh), "ghcr.io/", host+"/")
	repo, err := name.NewRepository(cacheRepo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if tags, err := remote.List(repo); err != nil || len(tags) == 0 {
		t.Errorf("registry cache %s: %d tags, %v: the build jobs pushed no step", cacheRepo, len(tags), err)
	} else {
		t.Logf("registry cache %s: %d tags", cacheRepo, len(tags))
		checkCacheSigned(t, cacheRepo, tags[0], filepath.Join(keys, "cache", uki.CertFile), filepath.Join(keys, uki.CertFile))
	}

	// The digests the build jobs hand on (their outputs, combined as
	// GitHub combines a matrix's), each what its stage tag holds now.
	prefix := host + "/ironcore-dev/os-images/test:"
	ctx := context.Background()
	indexCtx := maps(gh)
	stagedV1 := map[string]string{} // arch -> the v1 manifest its job pushed
	for i, r := range results {
		arch := matrix[i]["arch"]
		stage, err := publish.Inspect(ctx, fmt.Sprintf("%s0.1.0-0123456-%s", prefix, arch), insecure)
		if err != nil {
			t.Fatal(err)
		}
		stagedV1[arch] = stage.Manifests[0].Digest
		if want := map[string]string{arch: "test/" + arch + "@" + stage.Digest}; !reflect.DeepEqual(r.outputs, want) {
			t.Errorf("build (%s) outputs %v, want %v", arch, r.outputs, want)
		}
		for k, v := range r.outputs {
			if old, ok := indexCtx["needs."+buildJob+".outputs."+k]; ok && old != v {
				t.Fatalf("two build jobs set output %s: %q and %q", k, old, v)
			}
			indexCtx["needs."+buildJob+".outputs."+k] = v
		}
	}
	for name := range wf.Jobs[buildJob].Outputs {
		if _, ok := indexCtx["needs."+buildJob+".outputs."+name]; !ok {
			indexCtx["needs."+buildJob+".outputs."+name] = "" // unset: empty, as on GitHub
		}
	}
	// Someone with packages: write moves the arm64 stage tag (here to
	// the amd64 image) before the index job runs.
	amd64Stage, err := name.ParseReference(prefix+"0.1.0-0123456-amd64", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	amd64Index, err := remote.Index(amd64Stage)
	if err != nil {
		t.Fatal(err)
	}
	arm64Tag, err := name.NewTag(prefix+"0.1.0-0123456-arm64", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Tag(arm64Tag, amd64Index); err != nil {
		t.Fatal(err)
	}

	// The index job.
	start = time.Now()
	index := jobRun{name: indexJob, job: wf.Jobs[indexJob], ctx: indexCtx, registry: host, workspace: newWorkspace(t, bin), extraEnv: recipeEnv}
	log, _, err := index.run(t)
	t.Logf("index job: %s\n%s", time.Since(start).Round(time.Millisecond), log)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(nodeStrings(wf.Jobs[indexJob].Needs), buildJob) {
		t.Errorf("job %s does not need %s", indexJob, buildJob)
	}
	pushed, err := os.ReadFile(filepath.Join(index.workspace, "out", "publish", "pushed.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{prefix + "0.1.0", prefix + "0.1.0-0123456", prefix + "latest"}
	if got := strings.Fields(string(pushed)); !slices.Equal(got, want) {
		t.Fatalf("index job pushed %q, want %q", got, want)
	}
	ins, err := publish.Inspect(ctx, want[0], insecure)
	if err != nil {
		t.Fatal(err)
	}
	atts, err := publish.FetchAttestations(ctx, want[0], insecure)
	if err != nil {
		t.Fatal(err)
	}
	if atts.SBOMSignature == nil || atts.ProvenanceSignature == nil {
		t.Errorf("joined index: SBOM and provenance unsigned")
	}
	if atts.Predicate.RunDetails.Builder.ID != "https://github.com/ironcore-dev/os-builder/actions/runs/20" {
		t.Errorf("provenance builder id %q", atts.Predicate.RunDetails.Builder.ID)
	}
	idx, err := publish.Open(ctx, want[0], insecure)
	if err != nil {
		t.Fatal(err)
	}
	ii := ironcoreImagePlatformBinary(t)
	for _, arch := range []string{"amd64", "arm64"} {
		m := outputs[arch]
		v1 := ""
		for _, im := range ins.Manifests {
			if im.Kind == publish.KindV1 && im.Platform == "linux/"+arch && v1 == "" {
				v1 = im.Digest
			}
		}
		if v1 == "" || v1 != stagedV1[arch] {
			t.Errorf("%s: joined index's v1 manifest %q, the %s job pushed %s", arch, v1, arch, stagedV1[arch])
		}

		// ironcore-image v0.5.0, asked for linux/ARCH.
		out := testutil.Run(t, ii, t.TempDir(), "linux/"+arch, want[0])
		var got struct {
			Digest, OS, Architecture, CommandLine, KernelDigest string
			KernelHead                                          []byte
			ResolveImage                                        string
		}
		if err := json.Unmarshal(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:], &got); err != nil {
			t.Fatalf("ironcore-image linux/%s: %v\n%s", arch, err, out)
		}
		if got.Digest != v1 || got.OS != "linux" || got.Architecture != arch {
			t.Errorf("ironcore-image pulled %s %s/%s for linux/%s, want %s", got.Digest, got.OS, got.Architecture, arch, v1)
		}
		if want := "sha256:" + artifactSum(t, m, osimage.KindKernel); got.KernelDigest != want {
			t.Errorf("ironcore-image linux/%s: kernel layer %s, the %s build's vmlinuz %s", arch, got.KernelDigest, arch, want)
		}
		if err := kernelArch(got.KernelHead, arch); err != nil {
			t.Errorf("ironcore-image linux/%s: %v", arch, err)
		}
		if got.ResolveImage != "" {
			// Known: v0.5.0's library ResolveImage refuses layer media
			// types it does not know; pull and inspect do not.
			t.Logf("ironcore-image linux/%s: its ResolveImage says: %s", arch, got.ResolveImage)
		}
		if got.CommandLine != m.Cmdline {
			t.Errorf("ironcore-image linux/%s: commandLine %q, the %s build's %q", arch, got.CommandLine, arch, m.Cmdline)
		}

		// boot-operator's resolution.
		view, err := osimagetest.ResolveLikeBootOperator(idx, arch)
		if err != nil {
			t.Fatalf("%s: %v", arch, err)
		}
		if view.Manifest.Digest.String() != v1 {
			t.Errorf("boot-operator resolves %s to %s, want the v1 manifest %s", arch, view.Manifest.Digest, v1)
		}
		if err := view.PXEReady(); err != nil {
			t.Errorf("%s: %v", arch, err)
		}
		if view.Kernel == nil || view.Initrd == nil {
			continue
		}
		if d := view.Kernel.Digest.Hex; d != artifactSum(t, m, osimage.KindKernel) {
			t.Errorf("boot-operator's %s kernel %s is not the %s build's", arch, d, arch)
		}
		if d := view.Initrd.Digest.Hex; !slices.ContainsFunc(m.Artifacts, func(a osimage.Artifact) bool { return a.SHA256 == d }) {
			t.Errorf("boot-operator's %s initrd %s is none of the %s build's artifacts", arch, d, arch)
		}
		img, err := idx.Image(view.Manifest.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layer, err := img.LayerByDigest(view.Kernel.Digest)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := layer.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 1024)
		n, _ := io.ReadFull(rc, head)
		rc.Close()
		if err := kernelArch(head[:n], arch); err != nil {
			t.Errorf("boot-operator's %s kernel layer: %v", arch, err)
		}
	}
}

// maps copies a string map.
func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// artifactSum is the sha256 of a build's artifact of one kind.
func artifactSum(t *testing.T, m *osimage.BuildManifest, kind osimage.ArtifactKind) string {
	t.Helper()
	for _, a := range m.Artifacts {
		if a.Kind == kind {
			return a.SHA256
		}
	}
	t.Fatalf("build %s has no %s artifact", m.Architecture, kind)
	return ""
}

// kernelArch checks a kernel's first bytes against its architecture's
// boot header: x86's setup header "HdrS" at 0x202 (Documentation/arch/
// x86/boot.rst), arm64's Image header magic "ARM\x64" at 56
// (Documentation/arch/arm64/booting.rst).
func kernelArch(head []byte, arch string) error {
	magic := map[string]struct {
		off  int
		want string
	}{"amd64": {0x202, "HdrS"}, "arm64": {56, "ARM\x64"}}[arch]
	if magic.want == "" {
		return fmt.Errorf("no kernel magic known for %s", arch)
	}
	if len(head) < magic.off+len(magic.want) || string(head[magic.off:magic.off+len(magic.want)]) != magic.want {
		return fmt.Errorf("not an %s kernel: no %q at %#x", arch, magic.want, magic.off)
	}
	return nil
}

// TestWorkflowPublishesHypervisor: the build job's environment, without
// the PUBLISH_RECIPES TestWorkflowJobsEndToEnd adds, makes ci/publish.sh
// build recipes/hypervisor.yaml and no test recipe.
func TestWorkflowPublishesHypervisor(t *testing.T) {
	wf, buildJob, _ := readActionsWorkflow(t)
	if v, ok := wf.Jobs[buildJob].Env["PUBLISH_RECIPES"]; ok {
		t.Errorf("job %s sets PUBLISH_RECIPES=%q: the workflow publishes every non-test recipe", buildJob, v)
	}
	bin := builderBinary(t)
	cmds := publishDryRun(t, bin, nil, "PUBLISH_ARCH=amd64")
	var builds []string
	for _, c := range cmds {
		if len(c) > 1 && c[0] == "build" {
			builds = append(builds, c[1])
		}
	}
	if !slices.Contains(builds, "recipes/hypervisor.yaml") {
		t.Errorf("the build job builds %q, want recipes/hypervisor.yaml", builds)
	}
	for _, b := range builds {
		if strings.HasPrefix(filepath.Base(b), "test") {
			t.Errorf("the build job builds the test recipe %s", b)
		}
	}
}

// releaseBuilderBinary is bin/builder as the workflow's Builder step
// makes it (`make builder`: the builder carrying its init), built into the
// test's temporary directory.
func releaseBuilderBinary(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("make", "--no-print-directory", "builder", "BIN="+dir)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make builder BIN=%s: %v\n%s", dir, err, out)
	}
	return filepath.Join(dir, "builder")
}

// ironcoreImagePlatformBinary builds testdata/ironcore-image-platform
// inside a copy of the pinned ironcore-image module (its go.mod decides
// the dependencies), kept under the cache's tools/ per source digest.
func ironcoreImagePlatformBinary(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("testdata/ironcore-image-platform/main.go")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(src)
	dir := filepath.Join(cache.DefaultDir(), "tools", "ironcore-image-platform@"+ironcoreImageVersion+"-"+hex.EncodeToString(sum[:6]))
	return buildInIronCoreImage(t, filepath.Join(dir, "ironcore-image-platform"), "./cmd/osb-platform-pull", func(work string) {
		if err := os.MkdirAll(filepath.Join(work, "cmd", "osb-platform-pull"), 0o755); err != nil {
			t.Fatal(err)
		}
		testutil.WriteFile(t, filepath.Join(work, "cmd", "osb-platform-pull"), "main.go", src)
	})
}

// TestConcurrentPushesShareBlobs: pushes running at once into a registry
// that has none of their blobs yet (as the two architecture jobs of a
// first pipeline run) all succeed, though they upload the same blobs (the
// referrers' "{}" config, equal artifacts): docker-registry can refuse a
// manifest while another upload of its blob commits, and the push writes
// it again. Without that, about one round in five failed here.
func TestConcurrentPushesShareBlobs(t *testing.T) {
	requireRegistry(t)
	for round := range 3 {
		reg, err := testutil.StartRegistry()
		if err != nil {
			t.Fatal(err)
		}
		dirs := []string{outputDir(t, "amd64"), outputDir(t, "arm64"), outputDir(t, "amd64", osimage.KindUKI, osimage.KindCmdline), outputDir(t, "arm64", osimage.KindUKI, osimage.KindCmdline)}
		errs := make([]error, len(dirs))
		var wg sync.WaitGroup
		for i, d := range dirs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = publish.Push(context.Background(), d, fmt.Sprintf("%s/shared/blobs:%d", reg.Host, i), insecure)
			}()
		}
		wg.Wait()
		reg.Stop()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, push %d: %v", round, i, err)
			}
		}
	}
}

// checkCacheSigned: the build jobs' cache entry key is signed with the
// cache key (its certificate trusted: the entry is taken) and with no
// other (trusting the Secure Boot certificate instead: a miss).
func checkCacheSigned(t *testing.T, repo, key, cacheCert, otherCert string) {
	t.Helper()
	for _, tc := range []struct {
		cert string
		ok   bool
	}{{cacheCert, true}, {otherCert, false}} {
		c, err := uki.LoadCertificate(tc.cert)
		if err != nil {
			t.Fatal(err)
		}
		r, err := cacheremote.Open(repo, cacheremote.Trust(c))
		if err != nil {
			t.Fatal(err)
		}
		s, err := cache.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = r.Pull(context.Background(), s, key)
		if tc.ok && err != nil {
			t.Errorf("cache entry %.12s, trusting the cache key: %v", key, err)
		}
		if !tc.ok && !errors.Is(err, cacheremote.ErrUntrusted) {
			t.Errorf("cache entry %.12s, trusting another key: %v, want ErrUntrusted", key, err)
		}
	}
}

// TestJobRunnerOutputs: the test's job runner hands on a job's outputs as
// GitHub does: evaluated over what steps with an id wrote to
// $GITHUB_OUTPUT, an output no step set left out (a matrix job sets only
// its own architecture's), a step without an id writing one refused.
func TestJobRunnerOutputs(t *testing.T) {
	job := actionsJob{
		Outputs: map[string]string{"amd64": "${{ steps.s.outputs.amd64 }}", "arm64": "${{ steps.s.outputs.arm64 }}"},
		Steps:   []actionsStep{{ID: "s", Name: "hand on", Run: `echo "amd64=test/amd64@sha256:00" >> "$GITHUB_OUTPUT"`}},
	}
	j := jobRun{name: "build", job: job, ctx: map[string]string{}, workspace: t.TempDir()}
	_, outputs, err := j.run(t)
	if err != nil || !reflect.DeepEqual(outputs, map[string]string{"amd64": "test/amd64@sha256:00"}) {
		t.Errorf("outputs %v, %v", outputs, err)
	}
	j.job.Steps[0].ID = ""
	if _, _, err := j.run(t); err == nil || !strings.Contains(err.Error(), "has no id") {
		t.Errorf("a step without an id wrote an output: %v", err)
	}
}
