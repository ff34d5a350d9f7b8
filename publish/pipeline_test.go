package publish_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/publish"
	"github.com/ironcore-dev/os-builder/uki"
)

// TestPublishArchitectureJobs runs ci/publish.sh as the workflow's jobs
// run it, against a real registry: once per architecture (PUBLISH_ARCH,
// each pushing <version>-<sha7>-<arch> only), then the joining job
// (PUBLISH_JOIN="amd64 arm64"), which pulls both back and pushes one
// index under the release tags with both platforms' manifests, the ones
// the architecture jobs pushed, and SBOM and provenance attached, signed.
// ironcore-image v0.5.0 resolves the joined index to its linux/amd64
// manifest. The builds are faked (a small output per architecture), as in
// TestPublishScript.
func TestPublishArchitectureJobs(t *testing.T) {
	host := requireRegistry(t)
	tmp := t.TempDir()
	recipe := testutil.WriteFile(t, tmp, "hypervisor.yaml", []byte("name: hypervisor\nversion: \"1.2.0\"\nbase:\n  distribution: debian\n  architectures: [amd64, arm64]\n"))
	keys := filepath.Join(tmp, "keys")
	if err := uki.GenerateKey(keys, "pipeline test"); err != nil {
		t.Fatal(err)
	}
	flags := fmt.Sprintf("--locked --sign-key %s --sign-cert %s", filepath.Join(keys, uki.KeyFile), filepath.Join(keys, uki.CertFile))
	repo := host + "/pipeline/os-images/hypervisor"
	staged := map[string]string{} // arch -> its v1 manifest digest
	for _, arch := range []string{"amd64", "arm64"} {
		pushed, log := runPublish(t, host, publishRun{recipe: recipe, output: signedOutputDir(t, arch, keys), prefix: "pipeline", branch: "main", flags: flags,
			env: []string{"PUBLISH_ARCH=" + arch}})
		want := repo + ":1.2.0-0123456-" + arch
		if len(pushed) != 1 || pushed[0] != want {
			t.Fatalf("%s job pushed %q, want only %s:\n%s", arch, pushed, want, log)
		}
		ins, err := publish.Inspect(context.Background(), want, insecure)
		if err != nil {
			t.Fatal(err)
		}
		if len(ins.Manifests) == 0 || ins.Manifests[0].Platform != "linux/"+arch {
			t.Fatalf("%s job's image: %+v", arch, ins.Manifests)
		}
		staged[arch] = ins.Manifests[0].Digest
	}
	pushed, log := runPublish(t, host, publishRun{recipe: recipe, output: "/nonexistent", prefix: "pipeline", branch: "main", flags: flags,
		env: []string{"PUBLISH_JOIN=amd64 arm64"}})
	var want []string
	for _, tag := range []string{"1.2.0", "1.2.0-0123456", "latest"} {
		want = append(want, repo+":"+tag)
	}
	if !slices.Equal(pushed, want) {
		t.Fatalf("joining job pushed %q, want %q:\n%s", pushed, want, log)
	}
	ins, err := publish.Inspect(context.Background(), want[0], insecure)
	if err != nil {
		t.Fatal(err)
	}
	v1 := map[string]string{}
	for _, m := range ins.Manifests {
		if m.Kind == publish.KindV1 {
			v1[strings.TrimPrefix(m.Platform, "linux/")] = m.Digest
		}
	}
	for arch, d := range staged {
		if v1[arch] != d {
			t.Errorf("joined index: %s v1 manifest %s, the %s job pushed %s", arch, v1[arch], arch, d)
		}
	}
	if len(ins.Referrers) < 2 {
		t.Errorf("joined index: referrers %+v, want SBOM and provenance", ins.Referrers)
	}
	// ironcore-image pulls the joined index per platform as it pulls any:
	// the host's (linux/amd64) v1 manifest.
	ii := ironcoreImageBinary(t)
	out := testutil.Run(t, ii, "--store-path", t.TempDir(), "pull", want[0])
	if !strings.Contains(string(out), strings.TrimPrefix(v1["amd64"], "sha256:")) {
		t.Errorf("ironcore-image pull says %q, want the linux/amd64 manifest %s", out, v1["amd64"])
	}
}
