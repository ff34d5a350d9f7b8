package publish_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// workflowFile is the os-images pipeline GitHub runs (see its header);
// the scripts it calls stay under ci/.
const workflowFile = "../.github/workflows/os-images.yml"

type workflow struct {
	Env  map[string]string `yaml:"env"`
	Jobs map[string]struct {
		Env   map[string]string `yaml:"env"`
		Steps []struct {
			Name string            `yaml:"name"`
			Uses string            `yaml:"uses"`
			Run  string            `yaml:"run"`
			Env  map[string]string `yaml:"env"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// TestWorkflowInvocations parses .github/workflows/os-images.yml and checks that
// every builder command a run step makes, directly or through
// ci/publish.sh (run with DRY_RUN=1 and the workflow's BUILD_FLAGS), is a
// real command and flag combination of the builder built from this tree:
// each is run with --help appended, which parses every flag and fails on
// an unknown one or an unknown command. No step may hide a failure with
// `|| true` (the Inspect step did, and asked for a tag publish.sh never
// pushes).
func TestWorkflowInvocations(t *testing.T) {
	raw, err := os.ReadFile(workflowFile)
	if err != nil {
		t.Fatal(err)
	}
	var wf workflow
	if err := yaml.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("%s: %v", workflowFile, err)
	}
	if len(wf.Jobs) == 0 {
		t.Fatalf("%s: no jobs", workflowFile)
	}
	bin := builderBinary(t)
	checked := 0
	for jobName, job := range wf.Jobs {
		buildFlags := strings.Fields(job.Env["BUILD_FLAGS"])
		// Steps that add to BUILD_FLAGS (for themselves or, through
		// $GITHUB_ENV, for later steps).
		for _, st := range job.Steps {
			for _, line := range strings.Split(st.Run, "\n") {
				if strings.Contains(line, "BUILD_FLAGS=") {
					buildFlags = append(buildFlags, flagTokens(line)...)
				}
			}
		}
		for _, st := range job.Steps {
			where := jobName + "/" + st.Name
			if strings.Contains(st.Run, "|| true") {
				t.Errorf("%s: `|| true` hides failures", where)
			}
			for _, line := range strings.Split(st.Run, "\n") {
				if args, ok := builderArgs(line); ok {
					checkInvocation(t, bin, where, args)
					checked++
				}
				if strings.Contains(line, "ci/publish.sh") {
					for _, args := range publishDryRun(t, bin, buildFlags, publishModes(job.Env)...) {
						checkInvocation(t, bin, where+" (ci/publish.sh)", args)
						checked++
					}
				}
			}
		}
	}
	if checked < 4 {
		t.Errorf("checked only %d builder invocations: is the workflow still calling ci/publish.sh and bin/builder?", checked)
	}
}

// builderInvocation finds `bin/builder ARGS` in a line of shell, up to the
// end of the simple command.
var builderInvocation = regexp.MustCompile(`(?:^|[\s;&|(])(?:\./)?bin/builder\s+([^;&|<>]*)`)

func builderArgs(line string) ([]string, bool) {
	m := builderInvocation.FindStringSubmatch(line)
	if m == nil || strings.Contains(line, "go build") {
		return nil, false
	}
	return shellWords(m[1]), true
}

// shellWords splits simple shell words; a word with a parameter expansion
// stands for one argument and becomes "X".
func shellWords(s string) []string {
	var out []string
	for _, w := range regexp.MustCompile(`"[^"]*"|'[^']*'|\S+`).FindAllString(s, -1) {
		if strings.Contains(w, "$") {
			w = "X"
		}
		out = append(out, strings.Trim(w, `"'`))
	}
	return out
}

// flagTokens returns the --flags a line mentions (inside quotes too).
func flagTokens(s string) []string {
	return regexp.MustCompile(`--[a-z][a-z0-9-]*`).FindAllString(s, -1)
}

// publishDryRun runs ci/publish.sh with DRY_RUN=1 and returns the builder
// commands it would run.
func publishDryRun(t *testing.T, bin string, buildFlags []string, env ...string) [][]string {
	t.Helper()
	var flags []string
	for i := 0; i < len(buildFlags); i++ {
		f := buildFlags[i]
		flags = append(flags, f)
		if f == "--sign-key" || f == "--sign-cert" {
			flags = append(flags, "/run/secrets/"+strings.TrimPrefix(f, "--"))
		}
	}
	cmd := exec.Command("bash", "../ci/publish.sh")
	cmd.Env = append(os.Environ(), "DRY_RUN=1", "OS_IMAGES_REGISTRY=registry.test/org", "BUILDER="+bin,
		"OUT_DIR="+t.TempDir(), "BUILD_FLAGS="+strings.Join(flags, " "), "GIT_SHA=0123456789abcdef0123456789abcdef01234567", "GIT_REF=refs/heads/main")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("DRY_RUN=1 ci/publish.sh: %v\n%s", err, out)
	}
	var cmds [][]string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "+ "+bin+" ")
		if ok {
			cmds = append(cmds, strings.Fields(line))
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("DRY_RUN=1 ci/publish.sh ran no builder command:\n%s", out)
	}
	return cmds
}

// checkInvocation runs `builder ARGS --help`: cobra parses every flag
// first, so an unknown command or flag fails it.
func checkInvocation(t *testing.T, bin, where string, args []string) {
	t.Helper()
	cmd := exec.Command(bin, append(append([]string(nil), args...), "--help")...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Usage:") {
		t.Errorf("%s: builder %s is not a valid command: %v\n%s", where, strings.Join(args, " "), err, out)
		return
	}
	t.Logf("%s: builder %s: ok", where, strings.Join(args, " "))
}

// releaseWorkflow is the part of the workflow the release gate tests read.
type releaseWorkflow struct {
	Permissions yaml.Node `yaml:"permissions"`
	Env         map[string]string
	Jobs        map[string]struct {
		If          string            `yaml:"if"`
		Environment yaml.Node         `yaml:"environment"`
		Permissions yaml.Node         `yaml:"permissions"`
		Env         map[string]string `yaml:"env"`
		Steps       []struct {
			Name string            `yaml:"name"`
			If   string            `yaml:"if"`
			Uses string            `yaml:"uses"`
			Run  string            `yaml:"run"`
			Env  map[string]string `yaml:"env"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

func readReleaseWorkflow(t *testing.T) (releaseWorkflow, string) {
	t.Helper()
	raw, err := os.ReadFile(workflowFile)
	if err != nil {
		t.Fatal(err)
	}
	var wf releaseWorkflow
	if err := yaml.Unmarshal(raw, &wf); err != nil {
		t.Fatalf("%s: %v", workflowFile, err)
	}
	return wf, string(raw)
}

// grantsWrite reports whether a permissions node grants any write scope
// (write-all included).
func grantsWrite(n yaml.Node) bool {
	if n.Kind == yaml.ScalarNode {
		return strings.Contains(n.Value, "write")
	}
	for i := 1; i < len(n.Content); i += 2 {
		if n.Content[i].Value == "write" {
			return true
		}
	}
	return false
}

// environmentName is a job's environment: a string or {name: ...}.
func environmentName(n yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		return n.Value
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "name" {
			return n.Content[i+1].Value
		}
	}
	return ""
}

// refCondition evaluates a job's `if:` for a ref. It understands only
// alternatives (`||`) of `github.ref == 'X'` and
// `startsWith(github.ref, 'X')`: a gate in any other form is not trusted
// to mean what it seems to.
func refCondition(t *testing.T, expr, ref string) bool {
	t.Helper()
	expr = strings.TrimSpace(expr)
	expr = strings.TrimSuffix(strings.TrimPrefix(expr, "${{"), "}}")
	eq := regexp.MustCompile(`^github\.ref\s*==\s*'([^']*)'$`)
	prefix := regexp.MustCompile(`^startsWith\(\s*github\.ref\s*,\s*'([^']*)'\s*\)$`)
	any := false
	for _, term := range strings.Split(expr, "||") {
		term = strings.TrimSpace(term)
		for strings.HasPrefix(term, "(") && strings.HasSuffix(term, ")") && !prefix.MatchString(term) {
			term = strings.TrimSpace(term[1 : len(term)-1])
		}
		switch {
		case eq.MatchString(term):
			any = any || ref == eq.FindStringSubmatch(term)[1]
		case prefix.MatchString(term):
			any = any || strings.HasPrefix(ref, prefix.FindStringSubmatch(term)[1])
		default:
			t.Fatalf("job condition %q: term %q is not github.ref == '...' or startsWith(github.ref, '...')", expr, term)
		}
	}
	return any
}

// TestWorkflowReleaseGate: only main and release tags (v*) reach a job
// that can publish (packages: write) or sign (a secret), and such a job
// runs in a named environment, whose protection rules (deployment
// branches main and v* tags, the signing secrets stored there) GitHub
// enforces even on a workflow edited on a branch. The workflow's own
// permissions grant nothing to write.
func TestWorkflowReleaseGate(t *testing.T) {
	wf, _ := readReleaseWorkflow(t)
	if grantsWrite(wf.Permissions) {
		t.Errorf("workflow-level permissions grant write to every job: grant it per release job")
	}
	for k, v := range wf.Env {
		if strings.Contains(v, "secrets.") {
			t.Errorf("workflow env %s reads a secret: every job would get it", k)
		}
	}
	refs := []struct {
		ref     string
		release bool
	}{
		{"refs/heads/main", true},
		{"refs/tags/v1.2.0", true},
		{"refs/heads/feature", false},
		{"refs/heads/main-fix", false},
		{"refs/heads/v1.2.0", false},
		{"refs/tags/main", false},
		{"refs/tags/1.2.0", false},
		{"refs/pull/7/merge", false},
	}
	gated := 0
	for name, job := range wf.Jobs {
		secrets := false
		for _, v := range job.Env {
			secrets = secrets || strings.Contains(v, "secrets.")
		}
		for _, st := range job.Steps {
			for _, v := range st.Env {
				secrets = secrets || strings.Contains(v, "secrets.")
			}
			secrets = secrets || strings.Contains(st.Run, "secrets.")
		}
		if !secrets && !grantsWrite(job.Permissions) {
			continue
		}
		gated++
		env := environmentName(job.Environment)
		if env == "" || strings.Contains(env, "${{") {
			t.Errorf("job %s publishes or reads secrets without a fixed protected environment (environment: %q)", name, env)
		}
		if job.If == "" {
			t.Errorf("job %s publishes or reads secrets on any ref: no if:", name)
			continue
		}
		for _, r := range refs {
			if got := refCondition(t, job.If, r.ref); got != r.release {
				t.Errorf("job %s runs on %s = %v, want %v (if: %s)", name, r.ref, got, r.release, job.If)
			}
		}
	}
	if gated == 0 {
		t.Errorf("no job publishes: is %s still the publishing workflow?", workflowFile)
	}
}

// TestWorkflowActionsPinned: every action is pinned by a full commit SHA
// (a tag can be moved to other code) with the version as a comment, so an
// update is a reviewed diff.
func TestWorkflowActionsPinned(t *testing.T) {
	_, raw := readReleaseWorkflow(t)
	pinned := regexp.MustCompile(`^\s*(?:-\s*)?uses:\s*[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]+@[0-9a-f]{40}\s+#\s*v\d+(?:\.\d+)*\s*$`)
	n := 0
	for i, line := range strings.Split(raw, "\n") {
		if !regexp.MustCompile(`^\s*(?:-\s*)?uses:`).MatchString(line) {
			continue
		}
		n++
		if !pinned.MatchString(line) {
			t.Errorf("%s:%d: %q: pin the action to a 40-hex commit with a `# vX.Y.Z` comment", workflowFile, i+1, strings.TrimSpace(line))
		}
	}
	if n == 0 {
		t.Errorf("%s: no actions found", workflowFile)
	}
}

// TestWorkflowSigningKey: the Secure Boot key reaches one step only, the
// one that builds, signs and pushes (ci/publish.sh), through that step's
// env; it is written to disk there, not handed to later steps through
// $GITHUB_ENV, and a later step that always runs (failure or
// cancellation included) removes it.
func TestWorkflowSigningKey(t *testing.T) {
	wf, _ := readReleaseWorkflow(t)
	keyFile := regexp.MustCompile(`>\s*"?([^"\s>]+\.key)"?`)
	for name, job := range wf.Jobs {
		for k, v := range job.Env {
			if strings.Contains(v, "SECURE_BOOT_DB_KEY") {
				t.Errorf("job %s: env %s hands the signing key to every step", name, k)
			}
		}
		signing := -1
		var path string
		for i, st := range job.Steps {
			uses := strings.Contains(st.Run, "SECURE_BOOT_DB_KEY")
			for _, v := range st.Env {
				uses = uses || strings.Contains(v, "SECURE_BOOT_DB_KEY")
			}
			if !uses {
				continue
			}
			where := name + "/" + st.Name
			if signing >= 0 {
				t.Errorf("%s: a second step gets the signing key", where)
				continue
			}
			signing = i
			if strings.Contains(st.Run, "secrets.") {
				t.Errorf("%s: a secret expanded into the script: pass it through env", where)
			}
			if !strings.Contains(st.Run, "ci/publish.sh") {
				t.Errorf("%s: the key is written in a step that does not sign (ci/publish.sh)", where)
			}
			for _, line := range strings.Split(st.Run, "\n") {
				if strings.Contains(line, "GITHUB_ENV") || strings.Contains(line, "GITHUB_OUTPUT") {
					t.Errorf("%s: hands something to later steps: %q", where, strings.TrimSpace(line))
				}
			}
			m := keyFile.FindStringSubmatch(st.Run)
			if m == nil {
				t.Errorf("%s: no key file written (> FILE.key)", where)
				continue
			}
			path = m[1]
		}
		if signing < 0 {
			continue
		}
		removed := false
		for _, st := range job.Steps[signing+1:] {
			if !strings.Contains(st.If, "always()") {
				continue
			}
			for _, line := range strings.Split(st.Run, "\n") {
				if strings.Contains(line, "rm ") && (strings.Contains(line, path) || strings.Contains(line, pathDir(path))) {
					removed = true
				}
			}
		}
		if !removed {
			t.Errorf("job %s: no step after signing with `if: always()` removes %s", name, path)
		}
	}
}

// pathDir is the directory part of a shell path.
func pathDir(p string) string {
	if i := strings.LastIndex(p, "/"); i > 0 {
		return p[:i]
	}
	return p
}

// publishModes is the environment a job hands ci/publish.sh that chooses
// its mode: PUBLISH_JOIN as written, PUBLISH_ARCH from the matrix as amd64
// (the architecture every recipe is built for), PUBLISH_STAGED (the build
// jobs' outputs) a made-up digest for every published recipe and joined
// architecture.
func publishModes(env map[string]string) []string {
	var out []string
	if v, ok := env["PUBLISH_ARCH"]; ok {
		if strings.Contains(v, "${{") {
			v = "amd64"
		}
		out = append(out, "PUBLISH_ARCH="+v)
	}
	if v, ok := env["PUBLISH_JOIN"]; ok {
		out = append(out, "PUBLISH_JOIN="+v)
		if _, ok := env["PUBLISH_STAGED"]; ok {
			var staged []string
			files, _ := filepath.Glob("../recipes/*.yaml")
			for _, f := range files {
				b, _ := os.ReadFile(f)
				m := regexp.MustCompile(`(?m)^name:\s*"?([a-z0-9._-]+)`).FindSubmatch(b)
				if m == nil || strings.HasPrefix(filepath.Base(f), "test") || strings.HasSuffix(f, "-test.yaml") {
					continue
				}
				for _, a := range strings.Fields(v) {
					staged = append(staged, string(m[1])+"/"+a+"@sha256:"+strings.Repeat("0", 64))
				}
			}
			out = append(out, "PUBLISH_STAGED="+strings.Join(staged, " "))
		}
	}
	return out
}

// pipeline is the part of the workflow the architecture tests read.
type pipeline struct {
	Jobs map[string]struct {
		If       string            `yaml:"if"`
		RunsOn   string            `yaml:"runs-on"`
		Needs    yaml.Node         `yaml:"needs"`
		Env      map[string]string `yaml:"env"`
		Strategy struct {
			Matrix struct {
				Include []map[string]string `yaml:"include"`
			} `yaml:"matrix"`
		} `yaml:"strategy"`
		Steps []struct {
			Name string            `yaml:"name"`
			Uses string            `yaml:"uses"`
			Run  string            `yaml:"run"`
			Env  map[string]string `yaml:"env"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

func readPipeline(t *testing.T) pipeline {
	t.Helper()
	raw, err := os.ReadFile(workflowFile)
	if err != nil {
		t.Fatal(err)
	}
	var p pipeline
	if err := yaml.Unmarshal(raw, &p); err != nil {
		t.Fatalf("%s: %v", workflowFile, err)
	}
	return p
}

// nodeStrings is a string or a list of strings (needs:).
func nodeStrings(n yaml.Node) []string {
	if n.Kind == yaml.ScalarNode {
		return []string{n.Value}
	}
	var out []string
	for _, c := range n.Content {
		out = append(out, c.Value)
	}
	return out
}

func runsPublish(steps []struct {
	Name string            `yaml:"name"`
	Uses string            `yaml:"uses"`
	Run  string            `yaml:"run"`
	Env  map[string]string `yaml:"env"`
}) bool {
	for _, st := range steps {
		if strings.Contains(st.Run, "ci/publish.sh") {
			return true
		}
	}
	return false
}

// TestWorkflowArchitectures: one job builds each architecture on GitHub's
// native runner for it (amd64 on ubuntu-24.04, arm64 on
// ubuntu-24.04-arm) through ci/publish.sh in PUBLISH_ARCH mode, and a job
// that needs it joins both (PUBLISH_JOIN) into one index.
func TestWorkflowArchitectures(t *testing.T) {
	p := readPipeline(t)
	want := map[string]string{"amd64": "ubuntu-24.04", "arm64": "ubuntu-24.04-arm"}
	var builders []string
	for name, job := range p.Jobs {
		if job.Env["PUBLISH_ARCH"] == "" {
			continue
		}
		builders = append(builders, name)
		if job.Env["PUBLISH_ARCH"] != "${{ matrix.arch }}" || job.RunsOn != "${{ matrix.runner }}" {
			t.Errorf("job %s: PUBLISH_ARCH %q on %q, want ${{ matrix.arch }} on ${{ matrix.runner }}", name, job.Env["PUBLISH_ARCH"], job.RunsOn)
		}
		got := map[string]string{}
		for _, m := range job.Strategy.Matrix.Include {
			got[m["arch"]] = m["runner"]
		}
		for arch, runner := range want {
			if got[arch] != runner {
				t.Errorf("job %s: %s runs on %q, want %s (native)", name, arch, got[arch], runner)
			}
		}
		if len(got) != len(want) {
			t.Errorf("job %s: matrix %v, want exactly %v", name, got, want)
		}
		if !runsPublish(job.Steps) {
			t.Errorf("job %s: does not run ci/publish.sh", name)
		}
	}
	if len(builders) != 1 {
		t.Fatalf("jobs building one architecture (env PUBLISH_ARCH): %v, want one matrix job", builders)
	}
	joined := 0
	for name, job := range p.Jobs {
		if job.Env["PUBLISH_JOIN"] == "" {
			continue
		}
		joined++
		if !slices.Contains(nodeStrings(job.Needs), builders[0]) {
			t.Errorf("job %s joins before %s has built (needs: %v)", name, builders[0], nodeStrings(job.Needs))
		}
		arches := strings.Fields(job.Env["PUBLISH_JOIN"])
		if len(arches) != 2 || !slices.Contains(arches, "amd64") || !slices.Contains(arches, "arm64") {
			t.Errorf("job %s: PUBLISH_JOIN %q, want amd64 and arm64", name, job.Env["PUBLISH_JOIN"])
		}
		if !runsPublish(job.Steps) {
			t.Errorf("job %s: does not run ci/publish.sh", name)
		}
	}
	if joined != 1 {
		t.Errorf("%d jobs join the architectures (env PUBLISH_JOIN), want 1", joined)
	}
}

// TestWorkflowRegistryCache: every job that builds shares step outputs
// through the registry ($OSB_CACHE_REPO), not actions/cache (which only
// helps the same key on the same repository and runner architecture);
// such a job runs for release refs only and signs what it pushes with the
// cache key, trusting no other.
func TestWorkflowRegistryCache(t *testing.T) {
	p := readPipeline(t)
	builds := 0
	for name, job := range p.Jobs {
		for _, st := range job.Steps {
			if strings.HasPrefix(st.Uses, "actions/cache@") {
				t.Errorf("job %s: step %q uses actions/cache: the registry is the cache", name, st.Name)
			}
		}
		if job.Env["PUBLISH_ARCH"] == "" {
			continue
		}
		builds++
		repo := job.Env["OSB_CACHE_REPO"]
		if !strings.Contains(repo, "/") || strings.Contains(repo, "secrets.") {
			t.Errorf("job %s: OSB_CACHE_REPO %q: want a registry repository (no secret)", name, repo)
		}
		// The release cache is written by release refs alone, signed with
		// the cache key from the environment's secrets, and read trusting
		// that key only (docs/build-graph.md, "Trusting a cache").
		if job.If == "" || refCondition(t, job.If, "refs/heads/feature") || refCondition(t, job.If, "refs/pull/7/merge") {
			t.Errorf("job %s writes the release cache on refs other than main and v* tags (if: %q)", name, job.If)
		}
		signed := false
		for _, st := range job.Steps {
			if !strings.Contains(st.Run, "ci/publish.sh") {
				continue
			}
			fromSecret := strings.Contains(st.Env["CACHE_KEY"], "secrets.OSB_CACHE_SIGN_KEY") && strings.Contains(st.Env["CACHE_CERT"], "secrets.OSB_CACHE_SIGN_CERT")
			signed = fromSecret && strings.Contains(st.Run, "--cache-sign-key") && strings.Contains(st.Run, "--cache-trust ") &&
				!strings.Contains(st.Run, "--cache-trust-unsigned")
		}
		if !signed {
			t.Errorf("job %s: its build does not sign cache entries with the OSB_CACHE_SIGN_KEY secret and trust only its certificate", name)
		}
	}
	if builds == 0 {
		t.Errorf("no job builds")
	}
}

// TestWorkflowDigestHandOff (finding 5 of issue 27): each architecture's
// job hands on the digests it pushed as a job output of its own (one per
// matrix architecture, set by a step with an id through $GITHUB_OUTPUT),
// and the index job gives ci/publish.sh every one of them as
// PUBLISH_STAGED, so the join pulls digests, not tags.
// TestWorkflowJobsEndToEnd runs the hand-off.
func TestWorkflowDigestHandOff(t *testing.T) {
	wf, buildJob, indexJob := readActionsWorkflow(t)
	build := wf.Jobs[buildJob]
	staged := wf.Jobs[indexJob].Env["PUBLISH_STAGED"]
	joined := strings.Fields(wf.Jobs[indexJob].Env["PUBLISH_JOIN"])
	for _, m := range build.Strategy.Matrix.Include {
		arch := m["arch"]
		if !slices.Contains(joined, arch) {
			t.Errorf("the index job joins %q, not %s", joined, arch)
		}
		out := build.Outputs[arch]
		ref := regexp.MustCompile(`^\$\{\{\s*steps\.([\w-]+)\.outputs\.` + arch + `\s*\}\}$`).FindStringSubmatch(out)
		if ref == nil {
			t.Errorf("job %s: output %s = %q, want ${{ steps.ID.outputs.%s }}", buildJob, arch, out, arch)
			continue
		}
		i := slices.IndexFunc(build.Steps, func(s actionsStep) bool { return s.ID == ref[1] })
		if i < 0 || !strings.Contains(build.Steps[i].Run, `"$PUBLISH_ARCH=`) || !strings.Contains(build.Steps[i].Run, "staged.txt") ||
			!strings.Contains(build.Steps[i].Run, "$GITHUB_OUTPUT") {
			t.Errorf("job %s: no step %q writes $PUBLISH_ARCH=<staged.txt> to $GITHUB_OUTPUT", buildJob, ref[1])
		}
		if !regexp.MustCompile(`\$\{\{\s*needs\.` + buildJob + `\.outputs\.` + arch + `\s*\}\}`).MatchString(staged) {
			t.Errorf("job %s: PUBLISH_STAGED = %q does not hand on needs.%s.outputs.%s", indexJob, staged, buildJob, arch)
		}
	}
}
