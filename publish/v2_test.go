package publish_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
	"github.com/ironcore-dev/os-builder/publish"
)

// TestDualIndexReaders pushes two architectures to a real registry and
// reads the one index both ways: boot-operator main's way (the reference
// must be an OCI index; the first entry of the architecture; layers by
// media type) resolves the v1 manifest, unchanged; the V2 reader written
// from the IEP text finds every kind of each architecture by artifactType
// and platform, and its layers are the output's files (the initrd cut in
// its archives, the disk as qcow2).
func TestDualIndexReaders(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	amd, arm := outputDir(t, "amd64"), outputDir(t, "arm64")
	ref := host + "/os-images/dual:1.2.0"
	if _, err := publish.PushDirs(ctx, []string{arm, amd}, ref, insecure); err != nil {
		t.Fatal(err)
	}
	r, err := publish.ParseTarget(ref, insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(r.Remote)
	if err != nil {
		t.Fatal(err)
	}
	// boot-operator reads an index only when the reference's media type is
	// the OCI index's (a Docker manifest list is read as one manifest).
	if desc.MediaType != types.OCIImageIndex {
		t.Fatalf("the reference is %s, boot-operator needs %s", desc.MediaType, types.OCIImageIndex)
	}
	idx, err := publish.Open(ctx, ref, insecure)
	if err != nil {
		t.Fatal(err)
	}
	im, _ := idx.IndexManifest()
	var entries []string
	for _, d := range im.Manifests {
		entries = append(entries, d.Platform.Architecture+" "+d.ArtifactType)
	}
	want := []string{
		"amd64 " + osimage.ArtifactTypeV1, "amd64 application/vnd.ironcore+uki", "amd64 application/vnd.ironcore+efi", "amd64 application/vnd.ironcore+disk",
		"arm64 " + osimage.ArtifactTypeV1, "arm64 application/vnd.ironcore+uki", "arm64 application/vnd.ironcore+efi", "arm64 application/vnd.ironcore+disk",
	}
	if !slices.Equal(entries, want) {
		t.Errorf("index entries:\n%s\nwant:\n%s", strings.Join(entries, "\n"), strings.Join(want, "\n"))
	}
	for _, arch := range []string{"amd64", "arm64"} {
		dir := map[string]string{"amd64": amd, "arm64": arm}[arch]
		view, err := osimagetest.ResolveLikeBootOperator(idx, arch)
		if err != nil {
			t.Fatal(err)
		}
		if view.Manifest.ArtifactType != osimage.ArtifactTypeV1 || view.PXEReady() != nil || view.HTTPReady() != nil || view.CommandLine != osimagetest.Cmdline {
			t.Errorf("%s: boot-operator resolves %+v", arch, view)
		}
		file := func(name string) string {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			s := sha256.Sum256(b)
			return "sha256:" + hex.EncodeToString(s[:])
		}
		for _, at := range osimagetest.IEPArtifactTypes {
			v, err := osimagetest.ReadV2(idx, at, arch)
			if err != nil {
				t.Fatalf("%s: %v", arch, err)
			}
			switch v.Kind {
			case "UKI":
				if v.Layers["kernel"][0].Digest.String() != file("vmlinuz") || len(v.Layers["initrd"]) != 2 || v.Config.Cmdline != osimagetest.Cmdline || !strings.Contains(v.Config.OSRelease, "VERSION_ID=\"12\"") {
					t.Errorf("%s UKI kind: %+v", arch, v)
				}
			case "EFI":
				if v.Layers["executable"][0].Digest.String() != file("uki.efi") {
					t.Errorf("%s EFI kind: %+v", arch, v.Layers)
				}
			case "Disk":
				if len(v.Layers["disk"]) != 1 {
					t.Errorf("%s Disk kind: %+v", arch, v.Layers)
				}
			}
		}
	}
	// The boot driver's reading from the registry: one build per
	// architecture, V2 preferred where it maps one to one, and said so.
	nref, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	builds, err := boot.RegistryImage(ctx, nref)
	if err != nil {
		t.Fatal(err)
	}
	if len(builds) != 2 {
		t.Fatalf("boot driver reads %d builds, want 2", len(builds))
	}
	for _, b := range builds {
		uki, _ := b.Artifact(osimage.KindUKI)
		if !strings.HasPrefix(b.Preferred, "IronCore Image V2 preferred over v1 for linux/"+b.Architecture) || uki.MediaType != osimage.V2MediaTypeEFIExecutable {
			t.Errorf("boot driver's %s build: %q, uki %s", b.Architecture, b.Preferred, uki.MediaType)
		}
	}
}

// TestPushNoV2 pushes with Options.NoV2 (builder push --no-v2): one v1
// manifest per architecture, which Verify accepts as what the output
// makes without V2; the IEP reader finds no V2 kind in it and says so.
func TestPushNoV2(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	out := outputDir(t, "amd64")
	ref := host + "/os-images/nov2:1.2.0"
	opts := insecure
	opts.NoV2 = true
	if _, err := publish.Push(ctx, out, ref, opts); err != nil {
		t.Fatal(err)
	}
	ins, err := publish.Verify(ctx, ref, []string{out}, insecure)
	if err != nil {
		t.Fatal(err)
	}
	if len(ins.Manifests) != 1 || ins.Manifests[0].Kind != publish.KindV1 {
		t.Errorf("--no-v2 push holds %+v", ins.Manifests)
	}
	idx, err := publish.Open(ctx, ref, insecure)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := osimagetest.ReadV2(idx, "application/vnd.ironcore+uki", "amd64"); err == nil || !strings.Contains(err.Error(), "no UKI manifest for linux/amd64") {
		t.Errorf("IEP reader of a v1-only index: %v", err)
	}
	// A V2 push of the same output is another index, and Verify tells
	// them apart.
	if _, err := publish.Push(ctx, out, ref, insecure); err != nil {
		t.Fatal(err)
	}
	if ins, err := publish.Verify(ctx, ref, []string{out}, insecure); err != nil || len(ins.Manifests) != 4 {
		t.Errorf("V2 push: %v, %d manifests", err, len(ins.Manifests))
	}
}

// TestPullKinds: pull takes the v1 manifest of a dual index, a V2 kind
// with Kind, and every V2 kind of an index that has no v1 manifest.
func TestPullKinds(t *testing.T) {
	ctx := context.Background()
	out := outputDir(t, "amd64")
	layoutPath := filepath.Join(t.TempDir(), "oci")
	if _, err := publish.PushLayout(out, layoutPath, "1"); err != nil {
		t.Fatal(err)
	}
	ref := "oci:" + layoutPath + ":1"
	names := func(dir string) []string {
		es, _ := os.ReadDir(dir)
		var n []string
		for _, e := range es {
			n = append(n, e.Name())
		}
		return n
	}
	dest := t.TempDir()
	if m, err := publish.Pull(ctx, ref, dest, publish.Options{}); err != nil || m == nil {
		t.Fatalf("pull: %v %v", m, err)
	}
	sameFiles(t, out, dest)
	for kind, want := range map[string][]string{
		"EFI":  {"uki.efi"},
		"UKI":  {"initrd-0.cpio", "initrd-1.cpio.zstd", "kernel.efi", "stub.efi"},
		"Disk": {"disk.qcow2"},
	} {
		dest := t.TempDir()
		if m, err := publish.Pull(ctx, ref, dest, publish.Options{Kind: kind}); err != nil || m != nil {
			t.Fatalf("pull %s: %v %v", kind, m, err)
		}
		if got := names(dest); !slices.Equal(got, want) {
			t.Errorf("pull %s wrote %v, want %v", kind, got, want)
		}
	}
	if _, err := publish.Pull(ctx, ref, t.TempDir(), publish.Options{Kind: "ISO"}); err == nil || !strings.Contains(err.Error(), "has no ISO manifest for amd64 (it has v1, UKI, EFI, Disk)") {
		t.Errorf("pull of a kind the index lacks: %v", err)
	}
}

// TestIEPReaderRefuses: the IEP reader refuses a V2 manifest whose config
// is another kind's, and so do the builder's readers.
func TestIEPReaderRefuses(t *testing.T) {
	imgs, err := osimage.NewV2Images(outputDir(t, "amd64"), nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := mutate.ConfigMediaType(imgs[1].Image, "application/vnd.ironcore.config.uki.v2+json") // the EFI kind
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: bad, Descriptor: v1.Descriptor{
		Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}, ArtifactType: "application/vnd.ironcore+efi"}})
	if _, err := osimagetest.ReadV2(idx, "application/vnd.ironcore+efi", "amd64"); err == nil || !strings.Contains(err.Error(), "config media type") {
		t.Errorf("IEP reader: %v", err)
	}
	if _, err := osimage.ReadIndexIdentity(idx, "amd64"); err == nil || !strings.Contains(err.Error(), "EFI manifest: config media type") {
		t.Errorf("ReadIndexIdentity: %v", err)
	}
}

// TestCLINoV2AndKind: `builder push --no-v2` publishes the v1 manifest
// alone, `builder pull --kind EFI` fetches the EFI kind's executable.
func TestCLINoV2AndKind(t *testing.T) {
	bin := builderBinary(t)
	out := outputDir(t, "amd64")
	dir := t.TempDir()
	for _, tc := range []struct {
		flags []string
		want  int
	}{{[]string{"--no-v2"}, 1}, {nil, 4}} {
		ref := "oci:" + filepath.Join(dir, "oci") + ":" + strconv.Itoa(tc.want)
		testutil.Run(t, bin, append(append([]string{"push"}, tc.flags...), out, ref)...)
		ins, err := publish.Inspect(context.Background(), ref, publish.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ins.Manifests) != tc.want {
			t.Errorf("push %v: %d manifests, want %d", tc.flags, len(ins.Manifests), tc.want)
		}
	}
	dest := filepath.Join(dir, "efi")
	testutil.Run(t, bin, "pull", "--kind", "EFI", "oci:"+filepath.Join(dir, "oci")+":4", dest)
	got, err := os.ReadFile(filepath.Join(dest, "uki.efi"))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := os.ReadFile(filepath.Join(out, "uki.efi")); string(got) != string(want) {
		t.Error("pull --kind EFI: uki.efi differs")
	}
}
