package publish_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/ocistore"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
	"github.com/ironcore-dev/os-builder/publish"
)

var insecure = publish.Options{Insecure: true}

func outputDir(t testing.TB, arch string, kinds ...osimage.ArtifactKind) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := osimagetest.WriteOutputDir(dir, arch, kinds...); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sameFiles checks that every file of want is in got with the same bytes.
func sameFiles(t *testing.T, want, got string) {
	t.Helper()
	entries, err := os.ReadDir(want)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		w, _ := os.ReadFile(filepath.Join(want, e.Name()))
		g, err := os.ReadFile(filepath.Join(got, e.Name()))
		if err != nil {
			t.Errorf("pulled: %v", err)
			continue
		}
		if !bytes.Equal(w, g) {
			t.Errorf("%s differs after the round trip", e.Name())
		}
	}
}

func TestPushPullRegistry(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	dir := outputDir(t, "amd64")
	ref := host + "/os-images/hypervisor:1.2.0"
	opts := insecure
	opts.Tags = []string{"1.2.0-abc1234", "latest"}
	digest, err := publish.Push(ctx, dir, ref, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{ref, host + "/os-images/hypervisor:1.2.0-abc1234", host + "/os-images/hypervisor:latest", host + "/os-images/hypervisor@" + digest.String()} {
		t.Run(r[len(host):], func(t *testing.T) {
			dest := t.TempDir()
			bm, err := publish.Pull(ctx, r, dest, insecure)
			if err != nil {
				t.Fatal(err)
			}
			if bm == nil || len(bm.Artifacts) != len(osimagetest.AllKinds) {
				t.Fatalf("pulled manifest = %+v", bm)
			}
			sameFiles(t, dir, dest)
		})
	}
	// boot-operator branches on the media type the registry reports.
	tag, _ := name.ParseReference(ref, name.Insecure)
	desc, err := remote.Get(tag)
	if err != nil {
		t.Fatal(err)
	}
	if desc.MediaType != types.OCIImageIndex || desc.Digest != digest {
		t.Errorf("registry serves %s %s, want %s %s", desc.MediaType, desc.Digest, types.OCIImageIndex, digest)
	}
}

func TestPushDigestMismatch(t *testing.T) {
	host := requireRegistry(t)
	dir := outputDir(t, "amd64")
	p := filepath.Join(dir, "initrd.img")
	data, _ := os.ReadFile(p)
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := publish.Push(context.Background(), dir, host+"/os-images/mismatch:1", insecure)
	if err == nil || !strings.Contains(err.Error(), osimage.ErrDigestMismatch.Error()) || !strings.Contains(err.Error(), "initrd.img") {
		t.Fatalf("err = %v, want a sha256 mismatch naming initrd.img", err)
	}
	// Nothing was tagged.
	tag, _ := name.ParseReference(host+"/os-images/mismatch:1", name.Insecure)
	if _, err := remote.Get(tag); err == nil {
		t.Error("a failed push left a tag behind")
	}
	// The layout target refuses it too, and leaves no blob with a wrong name.
	layoutPath := filepath.Join(t.TempDir(), "oci")
	if _, err := publish.PushLayout(dir, layoutPath, "1"); !errors.Is(err, osimage.ErrDigestMismatch) {
		t.Errorf("layout push err = %v", err)
	}
}

func TestResolveLikeBootOperatorFromRegistry(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	amd := outputDir(t, "amd64")
	arm := outputDir(t, "arm64", osimage.KindUKI, osimage.KindCmdline)
	ref := host + "/os-images/multiarch:1.2.0"
	if _, err := publish.PushDirs(ctx, []string{arm, amd}, ref, insecure); err != nil {
		t.Fatal(err)
	}
	idx, err := publish.Open(ctx, ref, insecure)
	if err != nil {
		t.Fatal(err)
	}
	view, err := osimagetest.ResolveLikeBootOperator(idx, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if err := view.PXEReady(); err != nil {
		t.Error(err)
	}
	if err := view.HTTPReady(); err != nil {
		t.Error(err)
	}
	if view.CommandLine != osimagetest.Cmdline {
		t.Errorf("commandLine = %q", view.CommandLine)
	}
	// Each layer boot-operator picks is the file it should be.
	for file, d := range map[string]*v1.Descriptor{"vmlinuz": view.Kernel, "initrd.img": view.Initrd, "root.squashfs": view.Squashfs, "uki.efi": view.UKI, "image.iso": view.ISO} {
		data, _ := os.ReadFile(filepath.Join(amd, file))
		sum := sha256.Sum256(data)
		if d == nil || d.Digest.Hex != hex.EncodeToString(sum[:]) {
			t.Errorf("boot-operator would serve %s as %v, file is sha256:%x", file, d, sum)
		}
	}
	armView, err := osimagetest.ResolveLikeBootOperator(idx, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	if armView.HTTPReady() != nil || armView.PXEReady() == nil {
		t.Errorf("arm64: HTTP %v, PXE %v", armView.HTTPReady(), armView.PXEReady())
	}

	// The boot driver's view of the same image.
	img, err := idx.Image(armView.Manifest.Digest)
	if err != nil {
		t.Fatal(err)
	}
	id, err := osimage.ReadIdentity(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.Supports(osimage.BootPXE); err == nil || !strings.Contains(err.Error(), "image offers no kernel+initrd for pxe: it has cmdline, uki") {
		t.Errorf("Supports(pxe) = %v", err)
	}

	// Pull needs an architecture for a multi-arch index.
	if _, err := publish.Pull(ctx, ref, t.TempDir(), insecure); err == nil || !strings.Contains(err.Error(), "amd64, arm64") {
		t.Errorf("pull without arch: %v", err)
	}
	opts := insecure
	opts.Arch = "arm64"
	dest := t.TempDir()
	if _, err := publish.Pull(ctx, ref, dest, opts); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, arm, dest)
}

func TestPushReproducible(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	d1, err := publish.Push(ctx, outputDir(t, "amd64"), host+"/os-images/repro:a", insecure)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := publish.Push(ctx, outputDir(t, "amd64"), host+"/os-images/repro:b", insecure)
	if err != nil {
		t.Fatal(err)
	}
	d3, err := publish.PushLayout(outputDir(t, "amd64"), filepath.Join(t.TempDir(), "oci"), "c")
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 || d1 != d3 {
		t.Errorf("same output, different digests: %s %s %s", d1, d2, d3)
	}
}

func TestInspectGolden(t *testing.T) {
	host := requireRegistry(t)
	ctx := context.Background()
	ref := host + "/os-images/inspect:1.2.0"
	if _, err := publish.PushDirs(ctx, []string{outputDir(t, "amd64"), outputDir(t, "arm64", osimage.KindKernel, osimage.KindInitrd, osimage.KindRootfs, osimage.KindDisk)}, ref, insecure); err != nil {
		t.Fatal(err)
	}
	ins, err := publish.Inspect(ctx, ref, insecure)
	if err != nil {
		t.Fatal(err)
	}
	// The provenance names the repository, whose port changes per run.
	for i, r := range ins.Referrers {
		if r.ArtifactType == publish.ArtifactTypeInToto {
			ins.Referrers[i].Digest, ins.Referrers[i].Size = "sha256:(names the registry port)", 0
		}
	}
	for _, tc := range []struct {
		golden string
		json   bool
	}{{"inspect.golden", false}, {"inspect.json.golden", true}} {
		var buf bytes.Buffer
		if err := publish.WriteInspection(&buf, ins, tc.json); err != nil {
			t.Fatal(err)
		}
		got := strings.ReplaceAll(buf.String(), host, "registry.test")
		testutil.Golden(t, filepath.Join("testdata", tc.golden), []byte(got))
	}
	// The layout copy inspects the same, apart from the reference.
	layoutPath := filepath.Join(t.TempDir(), "oci")
	if _, err := publish.PushLayout(outputDir(t, "amd64"), layoutPath, "1.2.0"); err != nil {
		t.Fatal(err)
	}
	lins, err := publish.Inspect(ctx, "oci:"+layoutPath+":1.2.0", publish.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// amd64: the v1 manifest and the three V2 kinds, as pushed.
	if len(lins.Manifests) != 4 {
		t.Fatalf("layout inspection: %d manifests, want 4", len(lins.Manifests))
	}
	for i := range lins.Manifests {
		if lins.Manifests[i].Digest != ins.Manifests[i].Digest || lins.Manifests[i].Kind != ins.Manifests[i].Kind {
			t.Errorf("layout manifest %d: %s %s, pushed %s %s", i, lins.Manifests[i].Kind, lins.Manifests[i].Digest, ins.Manifests[i].Kind, ins.Manifests[i].Digest)
		}
	}
}

func TestLayoutPushPull(t *testing.T) {
	ctx := context.Background()
	dir := outputDir(t, "amd64")
	work := t.TempDir()
	t.Chdir(work)

	// No reference: out/oci, tagged with the version.
	d1, err := publish.Push(ctx, dir, "", publish.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(work, publish.DefaultLayout, "index.json")); err != nil {
		t.Fatal(err)
	}
	// Re-pushing the same tag replaces, not duplicates, the entry.
	if _, err := publish.PushLayout(dir, publish.DefaultLayout, "1.2.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := publish.PushLayout(outputDir(t, "amd64", osimage.KindUKI), publish.DefaultLayout, "uki-only"); err != nil {
		t.Fatal(err)
	}
	var index struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	raw, _ := os.ReadFile(filepath.Join(publish.DefaultLayout, "index.json"))
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Manifests) != 2 {
		t.Errorf("index.json has %d entries, want 2: %s", len(index.Manifests), raw)
	}

	dest := t.TempDir()
	if _, err := publish.Pull(ctx, "oci:"+publish.DefaultLayout+":1.2.0", dest, publish.Options{}); err != nil {
		t.Fatal(err)
	}
	sameFiles(t, dir, dest)
	idx, err := publish.Open(ctx, "oci:"+publish.DefaultLayout+":1.2.0", publish.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := idx.Digest(); h != d1 {
		t.Errorf("layout index %s, pushed %s", h, d1)
	}
	if _, err := publish.Pull(ctx, "oci:"+publish.DefaultLayout, t.TempDir(), publish.Options{}); err == nil || !strings.Contains(err.Error(), "name one") {
		t.Errorf("untagged pull from a layout with two tags: %v", err)
	}
	if _, err := publish.Pull(ctx, "oci:"+publish.DefaultLayout+":nope", t.TempDir(), publish.Options{}); err == nil || !strings.Contains(err.Error(), `no tag "nope"`) {
		t.Errorf("missing tag: %v", err)
	}
}

func TestPullDetectsCorruptLayout(t *testing.T) {
	dir := outputDir(t, "amd64", osimage.KindUKI)
	layoutPath := filepath.Join(t.TempDir(), "oci")
	if _, err := publish.PushLayout(dir, layoutPath, "1"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "uki.efi"))
	sum := sha256.Sum256(data)
	blob := filepath.Join(layoutPath, "blobs", "sha256", hex.EncodeToString(sum[:]))
	data[0] ^= 0xff
	if err := os.WriteFile(blob, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	_, err := publish.Pull(context.Background(), "oci:"+layoutPath+":1", dest, publish.Options{})
	if !errors.Is(err, osimage.ErrDigestMismatch) {
		t.Fatalf("err = %v, want a digest mismatch", err)
	}
	if _, err := os.Stat(filepath.Join(dest, "uki.efi")); !os.IsNotExist(err) {
		t.Error("a corrupt artifact was left in the destination")
	}
}

// TestTamperedLayoutRefused: an oci: layout whose manifest or config was
// changed in place (same size, still valid JSON: the architecture swapped)
// is refused by Inspect, Pull and Open+ResolveLikeBootOperator, each
// naming the digest mismatch.
func TestTamperedLayoutRefused(t *testing.T) {
	ctx := context.Background()
	for _, blob := range []string{"manifest", "config"} {
		t.Run(blob, func(t *testing.T) {
			layoutPath := filepath.Join(t.TempDir(), "oci")
			if _, err := publish.PushLayout(outputDir(t, "amd64", osimage.KindUKI, osimage.KindCmdline), layoutPath, "1"); err != nil {
				t.Fatal(err)
			}
			p := layoutBlob(t, layoutPath, blob)
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte(`"amd64"`)) {
				t.Fatalf("%s has no \"amd64\" to swap:\n%s", blob, data)
			}
			if err := os.Chmod(p, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, bytes.Replace(data, []byte(`"amd64"`), []byte(`"arm64"`), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			ref := "oci:" + layoutPath + ":1"
			_, inspectErr := publish.Inspect(ctx, ref, publish.Options{})
			_, pullErr := publish.Pull(ctx, ref, t.TempDir(), publish.Options{})
			var resolveErr error
			if idx, err := publish.Open(ctx, ref, publish.Options{}); err != nil {
				resolveErr = err
			} else {
				_, resolveErr = osimagetest.ResolveLikeBootOperator(idx, "amd64")
			}
			for what, err := range map[string]error{"inspect": inspectErr, "pull": pullErr, "resolve": resolveErr} {
				if blob == "config" && what == "pull" {
					continue // Pull does not read the config
				}
				if !errors.Is(err, ocistore.ErrDigestMismatch) {
					t.Errorf("%s of a layout with a tampered %s: err = %v, want a digest mismatch", what, blob, err)
				}
			}
		})
	}
}

// layoutBlob returns the path of the v1 manifest's (the index's first)
// manifest or config blob in a layout holding one index.
func layoutBlob(t *testing.T, layoutPath, which string) string {
	t.Helper()
	blobPath := func(h v1.Hash) string { return filepath.Join(layoutPath, "blobs", h.Algorithm, h.Hex) }
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	root, err := v1.ParseIndexManifest(bytes.NewReader(read(filepath.Join(layoutPath, "index.json"))))
	if err != nil || len(root.Manifests) != 1 {
		t.Fatalf("index.json: %v %+v", err, root)
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(read(blobPath(root.Manifests[0].Digest))))
	if err != nil || len(idx.Manifests) == 0 {
		t.Fatalf("index: %v %+v", err, idx)
	}
	mfPath := blobPath(idx.Manifests[0].Digest) // the v1 manifest
	if which == "manifest" {
		return mfPath
	}
	mf, err := v1.ParseManifest(bytes.NewReader(read(mfPath)))
	if err != nil {
		t.Fatal(err)
	}
	return blobPath(mf.Config.Digest)
}
