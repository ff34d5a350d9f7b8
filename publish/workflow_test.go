package publish_test

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// workflowFile is the os-images pipeline, kept under ci/ (see its header).
const workflowFile = "../ci/workflows/os-images.yml"

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

// TestWorkflowInvocations parses ci/workflows/os-images.yml and checks that
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
		// Steps that add to BUILD_FLAGS through $GITHUB_ENV.
		for _, st := range job.Steps {
			for _, line := range strings.Split(st.Run, "\n") {
				if strings.Contains(line, "BUILD_FLAGS=") && strings.Contains(line, "GITHUB_ENV") {
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
					for _, args := range publishDryRun(t, bin, buildFlags) {
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
func publishDryRun(t *testing.T, bin string, buildFlags []string) [][]string {
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
		"OUT_DIR="+t.TempDir(), "BUILD_FLAGS="+strings.Join(flags, " "), "GIT_SHA=0123456789abcdef0123456789abcdef01234567", "GIT_BRANCH=main")
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
