package publish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/publish"
	"github.com/ironcore-dev/os-builder/uki"
)

var (
	builderOnce sync.Once
	builderBin  string
	builderErr  error
)

// builderBinary builds cmd/builder once per test binary: ci/publish.sh runs
// the real CLI (push, inspect --verify), not a stand-in.
func builderBinary(t testing.TB) string {
	t.Helper()
	builderOnce.Do(func() {
		dir, err := os.MkdirTemp("", "osb-publish-test-")
		if err != nil {
			builderErr = err
			return
		}
		builderBin = filepath.Join(dir, "builder")
		cmd := exec.Command("go", "build", "-o", builderBin, "../cmd/builder")
		if out, err := cmd.CombinedOutput(); err != nil {
			builderErr = fmt.Errorf("go build ./cmd/builder: %v\n%s", err, out)
		}
	})
	if builderErr != nil {
		t.Fatal(builderErr)
	}
	return builderBin
}

// publishRun is one ci/publish.sh run against the test registry.
type publishRun struct {
	recipe string // recipe file
	output string // prebuilt output that `builder build` stands for
	prefix string // registry path prefix
	branch string
	flags  string // BUILD_FLAGS
	env    []string
	outDir string // OUT_DIR; empty: a temporary directory
}

// runPublish runs ci/publish.sh with the real builder for push and
// inspect; its build step links the prebuilt output into place (this
// package tests publishing, the builder's tests the build). It returns
// the references publish.sh reports as pushed and its output.
func runPublish(t *testing.T, host string, r publishRun) ([]string, string) {
	t.Helper()
	pushed, log, err := tryPublish(t, host, r)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	return pushed, log
}

// tryPublish is runPublish for a run that may fail: its error.
func tryPublish(t *testing.T, host string, r publishRun) ([]string, string, error) {
	t.Helper()
	tmp := t.TempDir()
	real := builderBinary(t)
	wrapper := filepath.Join(tmp, "builder")
	script := fmt.Sprintf(`#!/bin/bash
set -euo pipefail
if [[ $1 == build ]]; then
	out=${@: -1}
	mkdir -p "$out"
	cp -al %[1]q/. "$out"/ 2>/dev/null || cp -a %[1]q/. "$out"/
	exit 0
fi
exec %[2]q "$@"
`, r.output, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	outDir := r.outDir
	if outDir == "" {
		outDir = filepath.Join(tmp, "out")
	}
	cmd := exec.Command("bash", "../ci/publish.sh", r.recipe)
	cmd.Env = append(os.Environ(),
		"OS_IMAGES_REGISTRY="+host+"/"+r.prefix, "OS_IMAGES_INSECURE=1", "BUILDER="+wrapper,
		"OUT_DIR="+outDir, "GIT_SHA=0123456789abcdef0123456789abcdef01234567", "GIT_REF=refs/heads/"+r.branch,
		"BUILD_FLAGS="+r.flags, "SOURCE_REPO=git+https://example.test/os-builder", "BUILDER_ID=https://example.test/run/1")
	cmd.Env = append(cmd.Env, r.env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, string(out), fmt.Errorf("publish.sh: %w", err)
	}
	b, err := os.ReadFile(filepath.Join(outDir, "pushed.txt"))
	if err != nil {
		return nil, string(out), fmt.Errorf("publish.sh wrote no pushed.txt: %w", err)
	}
	return strings.Fields(string(b)), string(out), nil
}

// TestPublishScript runs ci/publish.sh against the real registry with a
// small output and checks the tag scheme, that pushed.txt lists exactly
// the tags pushed (the workflow's Inspect step reads it; it used to guess
// :<sha7>, a tag publish.sh never pushed), and that a build without a key
// says its UKIs are unsigned.
func TestPublishScript(t *testing.T) {
	host := requireRegistry(t)
	tmp := t.TempDir()
	recipe := filepath.Join(tmp, "hypervisor.yaml")
	if err := os.WriteFile(recipe, []byte("name: hypervisor\nversion: \"1.2.0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(tmp, "keys")
	if err := uki.GenerateKey(keys, "publish test"); err != nil {
		t.Fatal(err)
	}
	// The key signs only outputs whose UKIs it signed.
	signedFake := signedOutputDir(t, "amd64", keys)
	// The build is faked; push signs the SBOM and provenance with the key.
	signFlags := fmt.Sprintf("--sign-key %s --sign-cert %s", filepath.Join(keys, uki.KeyFile), filepath.Join(keys, uki.CertFile))
	for _, tc := range []struct {
		branch   string
		output   string
		flags    string
		tags     []string
		unsigned bool
	}{
		{"feature", outputDir(t, "amd64"), "", []string{"1.2.0-0123456-feature"}, true},
		{"main", signedFake, signFlags, []string{"1.2.0", "1.2.0-0123456", "latest"}, false},
	} {
		pushed, log := runPublish(t, host, publishRun{recipe: recipe, output: tc.output, prefix: "script-" + tc.branch, branch: tc.branch, flags: tc.flags})
		repo := host + "/script-" + tc.branch + "/os-images/hypervisor"
		var want []string
		for _, tag := range tc.tags {
			want = append(want, repo+":"+tag)
		}
		if strings.Join(pushed, " ") != strings.Join(want, " ") {
			t.Errorf("%s: pushed.txt = %q, want %q", tc.branch, pushed, want)
		}
		if got := strings.Contains(log, "UKIs are unsigned"); got != tc.unsigned {
			t.Errorf("%s: says unsigned = %v, want %v:\n%s", tc.branch, got, tc.unsigned, log)
		}
		var digests []string
		for _, ref := range pushed {
			ins, err := publish.Inspect(context.Background(), ref, insecure)
			if err != nil {
				t.Fatalf("%s: %v\n%s", ref, err, log)
			}
			digests = append(digests, ins.Digest)
			a, err := publish.FetchAttestations(context.Background(), ref, insecure)
			if err != nil {
				t.Fatalf("%s: %v", ref, err)
			}
			if signed := a.SBOMSignature != nil && a.ProvenanceSignature != nil; signed == tc.unsigned {
				t.Errorf("%s: attestations signed %v, want %v", ref, signed, !tc.unsigned)
			}
		}
		for _, d := range digests[1:] {
			if d != digests[0] {
				t.Errorf("%s: tags point at different digests %s", tc.branch, strings.Join(digests, " "))
			}
		}
		if tc.branch != "main" {
			if _, err := publish.Inspect(context.Background(), repo+":latest", insecure); err == nil {
				t.Errorf("%s: latest pushed from a branch", tc.branch)
			}
		}
	}
}

// TestPublishPipeline is the os-images pipeline end to end on the built
// test image: ci/publish.sh pushes it to a real registry (and verifies
// each tag itself), then every pushed tag is inspected with `builder
// inspect --json`, its SBOM and provenance referrers fetched and parsed:
// the SBOM lists the image's Debian packages and Go modules, the
// provenance's subject is the pushed index.
func TestPublishPipeline(t *testing.T) {
	host := requireRegistry(t)
	out := testutil.Output(t, testutil.TestOutputEnv)
	m, err := osimage.ReadManifest(out)
	if err != nil {
		t.Fatal(err)
	}
	recipe, err := filepath.Abs("../recipes/test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	pushed, log := runPublish(t, host, publishRun{recipe: recipe, output: out, prefix: "pipeline", branch: "main"})
	t.Logf("publish.sh of %s: %s\n%s", out, time.Since(start).Round(time.Millisecond), log)
	if len(pushed) != 3 {
		t.Fatalf("pushed %q, want 3 tags", pushed)
	}
	// Again, as the next CI run of an unchanged commit: every blob is
	// there, and the deterministic SBOM and provenance are not attached
	// twice.
	start = time.Now()
	again, _ := runPublish(t, host, publishRun{recipe: recipe, output: out, prefix: "pipeline", branch: "main"})
	t.Logf("warm publish.sh: %s", time.Since(start).Round(time.Millisecond))
	if strings.Join(again, " ") != strings.Join(pushed, " ") {
		t.Errorf("second run pushed %q, first %q", again, pushed)
	}
	bin := builderBinary(t)
	ctx := context.Background()
	for _, ref := range pushed {
		cmdOut := testutil.Run(t, bin, "inspect", "--insecure", "--json", ref)
		var ins publish.Inspection
		if err := json.Unmarshal(cmdOut, &ins); err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		atts, err := publish.FetchAttestations(ctx, ref, insecure)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if len(ins.Referrers) != 2 || len(atts.Referrers) != 2 {
			t.Errorf("%s: referrers %+v, want an SBOM and a provenance", ref, ins.Referrers)
		}
		debs := atts.SBOM.PackagesWithPURL("pkg:deb/")
		if len(debs) != len(m.Packages) || len(debs) == 0 {
			t.Errorf("%s: SBOM lists %d Debian packages, manifest.json %d", ref, len(debs), len(m.Packages))
		}
		if len(m.GoPrograms) > 0 && len(atts.SBOM.PackagesWithPURL("pkg:golang/")) == 0 {
			t.Errorf("%s: manifest.json has Go programs, the SBOM no Go modules", ref)
		}
		if got := "sha256:" + atts.Provenance.Subject[0].Digest["sha256"]; got != ins.Digest {
			t.Errorf("%s: provenance subject %s, pushed index %s", ref, got, ins.Digest)
		}
		if atts.Predicate.RunDetails.Builder.ID != "https://example.test/run/1" {
			t.Errorf("%s: builder id %q", ref, atts.Predicate.RunDetails.Builder.ID)
		}
		if ref == pushed[0] {
			t.Logf("SBOM %d bytes (%d packages), provenance %d bytes", len(atts.SBOMBytes), len(atts.SBOM.Packages), len(atts.ProvenanceBytes))
		}
	}
}

// TestPublishTags runs ci/publish.sh's tag choice (DRY_RUN=1) for each
// kind of ref: the moving <version> and latest tags come only from main
// (latest) and release tags v* (<version>); any other ref, a tag named
// "main" included, pushes only <version>-<sha7>-<ref name>, which names
// where it came from and cannot be mistaken for a release.
func TestPublishTags(t *testing.T) {
	tmp := t.TempDir()
	recipe := filepath.Join(tmp, "hypervisor.yaml")
	if err := os.WriteFile(recipe, []byte("name: hypervisor\nversion: \"1.2.0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ref  string
		tags []string
	}{
		{"refs/heads/main", []string{"1.2.0", "1.2.0-0123456", "latest"}},
		{"refs/tags/v1.2.0", []string{"1.2.0", "1.2.0-0123456"}},
		{"refs/heads/feature/x", []string{"1.2.0-0123456-feature-x"}},
		{"refs/heads/main-fix", []string{"1.2.0-0123456-main-fix"}},
		{"refs/tags/main", []string{"1.2.0-0123456-main"}},
		{"refs/tags/1.2.0", []string{"1.2.0-0123456-1.2.0"}},
		{"refs/pull/7/merge", []string{"1.2.0-0123456-pull-7-merge"}},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			cmd := exec.Command("bash", "../ci/publish.sh", recipe)
			cmd.Env = append(os.Environ(), "DRY_RUN=1", "OS_IMAGES_REGISTRY=registry.test/org", "BUILDER=builder",
				"OUT_DIR="+t.TempDir(), "GIT_SHA=0123456789abcdef0123456789abcdef01234567", "GIT_REF="+tc.ref)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("publish.sh: %v\n%s", err, out)
			}
			var tags []string
			for _, line := range strings.Split(string(out), "\n") {
				args, ok := strings.CutPrefix(line, "+ builder push ")
				if !ok {
					continue
				}
				f := strings.Fields(args)
				_, tag, _ := strings.Cut(f[len(f)-1], "hypervisor:")
				tags = append(tags, tag)
				for i := range f[:len(f)-1] {
					if f[i] == "--tag" {
						tags = append(tags, f[i+1])
					}
				}
			}
			if strings.Join(tags, " ") != strings.Join(tc.tags, " ") {
				t.Errorf("tags %q, want %q\n%s", tags, tc.tags, out)
			}
		})
	}
}
