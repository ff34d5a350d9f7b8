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
// each pushing <version>-<sha7>-<arch> only and listing the digest it
// pushed in staged.txt), then the joining job (PUBLISH_JOIN="amd64
// arm64", PUBLISH_STAGED those lines), which pulls both back by digest,
// verifies each, and pushes one index under the release tags with both
// platforms' manifests, the ones the architecture jobs pushed, and SBOM
// and provenance attached, signed. A stage tag moved between the stage
// push and the join changes nothing (the join reads digests), and a stage
// whose attestations the build's certificate did not sign is refused
// before the key signs anything (finding 5 of issue 27).
// ironcore-image v0.5.0 resolves the joined index to its linux/amd64
// manifest. The builds are faked (a small output per architecture, its
// UKI signed with the key), as in TestPublishScript.
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
	var stagedLines []string      // what the jobs hand the join
	outputs := map[string]string{}
	for _, arch := range []string{"amd64", "arm64"} {
		outputs[arch] = signedOutputDir(t, arch, keys)
		outDir := t.TempDir()
		pushed, log := runPublish(t, host, publishRun{recipe: recipe, output: outputs[arch], prefix: "pipeline", branch: "main", flags: flags,
			env: []string{"PUBLISH_ARCH=" + arch}, outDir: outDir})
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
		lines := strings.Fields(string(testutil.ReadFile(t, filepath.Join(outDir, "staged.txt"))))
		if wantLine := "hypervisor/" + arch + "@" + ins.Digest; !slices.Equal(lines, []string{wantLine}) {
			t.Fatalf("%s job's staged.txt: %q, want %q", arch, lines, wantLine)
		}
		stagedLines = append(stagedLines, lines...)
	}
	// Someone with push access moves the arm64 stage tag to another
	// image (signed alike) before the join runs.
	moved := signedOutputDir(t, "arm64", keys)
	testutil.WriteFile(t, moved, "cmdline", []byte("console=ttyAMA0 init=/bin/sh\n"))
	rewriteManifest(t, moved)
	key, cert, err := uki.LoadSigner(filepath.Join(keys, uki.KeyFile), filepath.Join(keys, uki.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	signed := insecure
	signed.Signer, signed.SignCert = key, cert
	if _, err := publish.Push(context.Background(), moved, repo+":1.2.0-0123456-arm64", signed); err != nil {
		t.Fatal(err)
	}
	join := []string{"PUBLISH_JOIN=amd64 arm64", "PUBLISH_STAGED=" + strings.Join(stagedLines, " ")}
	pushed, log := runPublish(t, host, publishRun{recipe: recipe, output: "/nonexistent", prefix: "pipeline", branch: "main", flags: flags, env: join})
	if !strings.Contains(log, "inspect --insecure --verify") || !strings.Contains(log, "--sign-cert") {
		t.Errorf("the join did not verify the stages with the build's certificate:\n%s", log)
	}
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

// TestPublishJoinRefusesStages: the joining job refuses, before it signs
// or pushes anything, a join without the stage digests and a stage whose
// SBOM and provenance the build's certificate did not sign (pushed
// unsigned, or by another key), though its UKI is signed: what anyone
// with push access could put there, bypassing the architecture job's own
// checks (finding 5 of issue 27).
func TestPublishJoinRefusesStages(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	tmp := t.TempDir()
	recipe := testutil.WriteFile(t, tmp, "hypervisor.yaml", []byte("name: hypervisor\nversion: \"1.2.0\"\nbase:\n  distribution: debian\n  architectures: [amd64, arm64]\n"))
	keys, otherKeys := filepath.Join(tmp, "keys"), filepath.Join(tmp, "other")
	for _, k := range []string{keys, otherKeys} {
		if err := uki.GenerateKey(k, "join test"); err != nil {
			t.Fatal(err)
		}
	}
	flags := fmt.Sprintf("--locked --sign-key %s --sign-cert %s", filepath.Join(keys, uki.KeyFile), filepath.Join(keys, uki.CertFile))
	signedWith := func(k string) publish.Options {
		o := insecure
		var err error
		if o.Signer, o.SignCert, err = uki.LoadSigner(filepath.Join(k, uki.KeyFile), filepath.Join(k, uki.CertFile)); err != nil {
			t.Fatal(err)
		}
		return o
	}
	for _, tc := range []struct {
		name  string
		keys  string          // the arm64 stage's UKI key
		push  publish.Options // how the arm64 stage was pushed
		token bool            // PUBLISH_STAGED given
		want  string
	}{
		{"unsigned stage", keys, insecure, true, "is not signed"},
		{"stage signed by another key", otherKeys, signedWith(otherKeys), true, "signed with certificate"},
		{"no stage digests", keys, signedWith(keys), false, "PUBLISH_JOIN needs PUBLISH_STAGED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := "join-" + strings.ReplaceAll(tc.name, " ", "-")
			repo := host + "/" + prefix + "/os-images/hypervisor"
			outDir := t.TempDir()
			runPublish(t, host, publishRun{recipe: recipe, output: signedOutputDir(t, "amd64", keys), prefix: prefix, branch: "main", flags: flags,
				env: []string{"PUBLISH_ARCH=amd64"}, outDir: outDir})
			lines := strings.Fields(string(testutil.ReadFile(t, filepath.Join(outDir, "staged.txt"))))
			h, err := publish.Push(ctx, signedOutputDir(t, "arm64", tc.keys), repo+":1.2.0-0123456-arm64", tc.push)
			if err != nil {
				t.Fatal(err)
			}
			env := []string{"PUBLISH_JOIN=amd64 arm64"}
			if tc.token {
				env = append(env, "PUBLISH_STAGED="+strings.Join(append(lines, "hypervisor/arm64@"+h.String()), " "))
			}
			_, log, err := tryPublish(t, host, publishRun{recipe: recipe, output: "/nonexistent", prefix: prefix, branch: "main", flags: flags, env: env})
			if err == nil || !strings.Contains(log, tc.want) {
				t.Fatalf("join: %v, want it refused (%q):\n%s", err, tc.want, log)
			}
			if _, err := publish.Inspect(ctx, repo+":1.2.0", insecure); err == nil {
				t.Errorf("a refused join pushed the release tag")
			}
		})
	}
}
