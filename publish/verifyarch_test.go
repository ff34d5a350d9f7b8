package publish_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
	"github.com/ironcore-dev/os-builder/publish"
)

// multiArchOutput writes what `builder build` writes for a recipe of two
// architectures: OUTPUT/amd64 and OUTPUT/arm64, each with its
// manifest.json.
func multiArchOutput(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		if _, err := osimagetest.WriteOutputDir(filepath.Join(out, arch), arch); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestVerifyArchitectures (issue 33): Verify takes the output of a
// recipe with base.architectures as `builder build` writes it, and checks
// each architecture's manifests (v1 and V2) against the index entries of
// its platform; a mismatch names the architecture, the manifest's kind
// and the file that differs.
func TestVerifyArchitectures(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	out := multiArchOutput(t)
	ref := host + "/verify-arch/img:1"
	if _, err := publish.PushDirs(ctx, []string{out}, ref, insecure); err != nil {
		t.Fatal(err)
	}
	ins, err := publish.Verify(ctx, ref, []string{out}, insecure)
	if err != nil {
		t.Fatalf("verify of a two-architecture output: %v", err)
	}
	platforms := map[string]int{}
	for _, m := range ins.Manifests {
		platforms[m.Platform]++
	}
	if platforms["linux/amd64"] == 0 || platforms["linux/amd64"] != platforms["linux/arm64"] {
		t.Errorf("manifests per platform %v, want as many for amd64 as for arm64", platforms)
	}

	// The arm64 uki.efi differs: its v1 and EFI manifests do, amd64's not.
	other := t.TempDir()
	for _, arch := range []string{"amd64", "arm64"} {
		if _, err := osimagetest.WriteOutputDir(filepath.Join(other, arch), arch); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(other, "arm64", "uki.efi"), []byte("another uki"), 0o644); err != nil {
		t.Fatal(err)
	}
	rewriteManifest(t, filepath.Join(other, "arm64"))
	_, err = publish.Verify(ctx, ref, []string{other}, insecure)
	if err == nil {
		t.Fatal("verify against another arm64 output passed")
	}
	for _, want := range []string{"arm64 v1 manifest is sha256:", "arm64 EFI manifest is sha256:", "arm64/uki.efi is sha256:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v\nwant it to say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "amd64 ") {
		t.Errorf("err = %v\nnames amd64, whose manifests are the same", err)
	}

	// An output of one architecture against the index of two: the other
	// architecture's manifests are named as not made.
	_, err = publish.Verify(ctx, ref, []string{filepath.Join(out, "amd64")}, insecure)
	if err == nil || !strings.Contains(err.Error(), "arm64: the index has") {
		t.Errorf("verify of the amd64 output alone: err = %v, want the arm64 manifests named", err)
	}
}
