package publish_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/publish"
)

// arm64OutputEnv names recipes/test-multiarch.yaml's arm64 output, which
// `make test-image` builds.
const arm64OutputEnv = "OSB_TEST_ARM64_OUTPUT"

// TestPublishLocalArchitectures (issue 33): ci/publish.sh without
// PUBLISH_ARCH or PUBLISH_JOIN, as docs/image-format.md tells a user to
// run it on one machine, publishes a recipe of two architectures
// (recipes/test-multiarch.yaml) to a real registry: one index under the
// release tags, each architecture also alone under <version>-<arch>, every
// tag verified by the script (`builder inspect --verify` of the
// two-architecture output) and listed. The tags it lists are pulled back
// here per platform (`builder pull --arch A --kind EFI`: its uki.efi) and compared
// with the outputs. Its build step stands for `builder build` of the
// whole recipe (asked without --arch): it writes OUT/test/amd64 and
// OUT/test/arm64, the layout `builder build` writes, from the test image
// and its arm64 build (make test-image).
func TestPublishLocalArchitectures(t *testing.T) {
	host := requireRegistry(t)
	recipe, err := filepath.Abs("../recipes/test-multiarch.yaml")
	if err != nil {
		t.Fatal(err)
	}
	publishLocally(t, host, recipe, "local", "test", "0.1.0", map[string]string{
		"amd64": testutil.Output(t, testutil.TestOutputEnv),
		"arm64": testutil.Output(t, arm64OutputEnv),
	})
}

// TestPublishScriptArchitectures is TestPublishLocalArchitectures with
// small fake outputs, for a machine without the test images.
func TestPublishScriptArchitectures(t *testing.T) {
	host := requireRegistry(t)
	recipe := testutil.WriteFile(t, t.TempDir(), "hypervisor.yaml", []byte("name: hypervisor\nversion: \"1.2.0\"\nbase:\n  distribution: debian\n  architectures: [amd64, arm64]\n"))
	out := multiArchOutput(t)
	publishLocally(t, host, recipe, "local-fake", "hypervisor", "1.2.0", map[string]string{
		"amd64": filepath.Join(out, "amd64"), "arm64": filepath.Join(out, "arm64"),
	})
}

// publishLocally runs ci/publish.sh for recipe (name, version) whose
// build writes outputs (arch -> output) and checks what it pushed.
func publishLocally(t *testing.T, host, recipe, prefix, name, version string, outputs map[string]string) {
	t.Helper()
	built := t.TempDir()
	for arch, dir := range outputs {
		if err := os.Symlink(dir, filepath.Join(built, arch)); err != nil {
			t.Fatal(err)
		}
	}
	pushed, log := runPublish(t, host, publishRun{recipe: recipe, output: built, prefix: prefix, branch: "main"})
	t.Logf("publish.sh:\n%s", log)
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, " build "+recipe) && strings.Contains(line, "--arch") {
			t.Errorf("publish.sh built one architecture: %s", line)
		}
	}
	repo := host + "/" + prefix + "/os-images/" + name + ":"
	var want []string
	for _, tag := range []string{version, version + "-0123456", "latest", version + "-amd64", version + "-arm64"} {
		want = append(want, repo+tag)
	}
	if !slices.Equal(pushed, want) {
		t.Fatalf("pushed.txt = %q, want %q", pushed, want)
	}
	ctx := context.Background()
	bin := builderBinary(t)
	index, err := publish.Inspect(ctx, pushed[0], insecure)
	if err != nil {
		t.Fatal(err)
	}
	for i, ref := range pushed {
		ins, err := publish.Inspect(ctx, ref, insecure)
		if err != nil {
			t.Fatal(err)
		}
		archs := []string{"amd64", "arm64"}
		if i >= 3 {
			archs = []string{strings.TrimPrefix(ref, repo+version+"-")}
		} else if ins.Digest != index.Digest {
			t.Errorf("%s is %s, %s %s", ref, ins.Digest, pushed[0], index.Digest)
		}
		platforms := 0
		for _, a := range archs {
			for _, im := range ins.Manifests {
				if im.Platform == "linux/"+a {
					platforms++
				}
			}
		}
		if platforms != len(ins.Manifests) || platforms < len(archs) {
			t.Errorf("%s: %d of its %d manifests are of %v", ref, platforms, len(ins.Manifests), archs)
		}
		if i == 1 || i == 2 {
			continue // the index of pushed[0], pulled back below
		}
		// Pulled back as a consumer of each platform pulls it.
		for _, a := range archs {
			m, err := osimage.ReadManifest(outputs[a])
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "pulled")
			testutil.Run(t, bin, "pull", "--insecure", "--arch", a, "--kind", "EFI", ref, dir)
			sum := ""
			for _, art := range m.Artifacts {
				if art.Kind == osimage.KindUKI {
					sum = art.SHA256
				}
			}
			if got := testutil.FileSHA256(t, filepath.Join(dir, "uki.efi")); sum == "" || got != sum {
				t.Errorf("%s linux/%s: pulled uki.efi %s, the %s output's %s", ref, a, got, a, sum)
			}
		}
	}
}
