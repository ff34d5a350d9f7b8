package osimage_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/ironcore-dev/os-builder/diskimage/qcow2/qcow2test"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
)

func layerBytes(t *testing.T, img v1.Image, d v1.Descriptor) []byte {
	t.Helper()
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestV2Images: an output directory gives the three V2 kinds the IEP
// defines, each as the table says; the initrd is cut into its archives
// (their concatenation is initrd.img), the disk is a qcow2 that reads
// back as disk.raw, the kernel and UKI are the v1 layers' bytes, and the
// configs carry the command line, os-release and platform.
func TestV2Images(t *testing.T) {
	dir := writeDir(t, "amd64")
	imgs, err := osimage.NewV2Images(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []osimage.V2Kind
	for _, vi := range imgs {
		kinds = append(kinds, vi.Kind)
		mf, err := vi.Image.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if k, isV2, err := osimage.V2KindOf(mf); !isV2 || err != nil || k != vi.Kind {
			t.Errorf("%s: V2KindOf = %s, %v, %v", vi.Kind, k, isV2, err)
		}
		raw, _ := vi.Image.RawConfigFile()
		var cfg osimage.V2Config
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.Architecture != "amd64" || cfg.OS != "linux" {
			t.Errorf("%s config: %s", vi.Kind, raw)
		}
		switch vi.Kind {
		case osimage.V2UKI:
			if cfg.Cmdline != osimagetest.Cmdline || !strings.Contains(cfg.OSRelease, "ID=\"debian\"\n") {
				t.Errorf("UKI config %s", raw)
			}
			if got := layerBytes(t, vi.Image, mf.Layers[0]); !bytes.Equal(got, osimagetest.Content(osimage.KindKernel, "amd64")) {
				t.Error("kernel.efi is not vmlinuz")
			}
			last := mf.Layers[len(mf.Layers)-1]
			if last.MediaType != osimage.V2MediaTypeStub || last.Annotations[osimage.AnnotationTitle] != "stub.efi" ||
				!bytes.Equal(layerBytes(t, vi.Image, last), osimagetest.Content(osimage.KindStub, "amd64")) {
				t.Errorf("last layer %s %v is not stub.efi", last.MediaType, last.Annotations)
			}
			var initrd []byte
			var mts []string
			for _, l := range mf.Layers[1 : len(mf.Layers)-1] {
				initrd = append(initrd, layerBytes(t, vi.Image, l)...)
				mts = append(mts, string(l.MediaType))
			}
			if !bytes.Equal(initrd, osimagetest.Content(osimage.KindInitrd, "amd64")) {
				t.Error("the initrd layers do not concatenate to initrd.img")
			}
			if want := []string{osimage.V2MediaTypeInitrd, osimage.V2MediaTypeInitrdZstd}; strings.Join(mts, " ") != strings.Join(want, " ") {
				t.Errorf("initrd layers %v, want %v", mts, want)
			}
		case osimage.V2EFI:
			if len(raw) != len(`{"architecture":"amd64","os":"linux"}`) {
				t.Errorf("EFI config %s", raw)
			}
			if got := layerBytes(t, vi.Image, mf.Layers[0]); !bytes.Equal(got, osimagetest.Content(osimage.KindUKI, "amd64")) {
				t.Error("efi.executable is not uki.efi")
			}
		case osimage.V2Disk:
			q := layerBytes(t, vi.Image, mf.Layers[0])
			img, err := qcow2test.Open(bytes.NewReader(q), int64(len(q)))
			if err != nil {
				t.Fatal(err)
			}
			disk := osimagetest.Content(osimage.KindDisk, "amd64")
			back := &memDisk{b: make([]byte, img.VirtualSize)}
			if err := img.WriteRaw(back); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.b, disk) {
				t.Error("the qcow2 layer does not read back as disk.raw")
			}
		}
	}
	if len(kinds) != 3 || kinds[0] != osimage.V2UKI || kinds[1] != osimage.V2EFI || kinds[2] != osimage.V2Disk {
		t.Errorf("kinds %v, want UKI EFI Disk", kinds)
	}
	// Reproducible: another directory with the same files, same digests.
	again, err := osimage.NewV2Images(writeDir(t, "amd64"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range imgs {
		a, _ := imgs[i].Image.Digest()
		b, _ := again[i].Image.Digest()
		if a != b {
			t.Errorf("%s: %s then %s", imgs[i].Kind, a, b)
		}
	}
}

type memDisk struct{ b []byte }

func (m *memDisk) WriteAt(p []byte, off int64) (int, error) { return copy(m.b[off:], p), nil }

// TestV2ImagesCheckDigests: the initrd and the disk are read to make
// their V2 layers, and checked against manifest.json while read.
func TestV2ImagesCheckDigests(t *testing.T) {
	for _, name := range []string{"initrd.img", "disk.raw"} {
		dir := writeDir(t, "amd64")
		p := filepath.Join(dir, name)
		b, _ := os.ReadFile(p)
		b[len(b)-1] ^= 1
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := osimage.NewV2Images(dir, nil); !errors.Is(err, osimage.ErrDigestMismatch) {
			t.Errorf("%s changed: %v, want ErrDigestMismatch", name, err)
		}
	}
}

// TestIndexWithoutV2: the option and the recipe's imageV2: false (as
// manifest.json's noImageV2) leave the index as v1 alone.
func TestIndexWithoutV2(t *testing.T) {
	dir := writeDir(t, "amd64")
	count := func(idx v1.ImageIndex) int {
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		return len(im.Manifests)
	}
	idx, err := osimage.NewIndexOf(osimage.IndexOptions{NoV2: true}, dir)
	if err != nil || count(idx) != 1 {
		t.Fatalf("NoV2: %v", err)
	}
	m, _ := osimage.ReadManifest(dir)
	m.NoImageV2 = true
	if err := osimagetest.WriteManifest(dir, m); err != nil {
		t.Fatal(err)
	}
	if idx, err = osimage.NewIndexFromDirs(dir); err != nil || count(idx) != 1 {
		t.Fatalf("noImageV2 in manifest.json: %v", err)
	}
}

// TestCheckV2Manifest: manifests whose layers disagree with their kind
// or config are refused, each with a message naming the disagreement.
func TestCheckV2Manifest(t *testing.T) {
	zstd := osimage.V2MediaTypeInitrdZstd
	for _, tc := range []struct {
		name, at, cfg string
		layers        []string
		want          string
	}{
		{"ok", osimage.V2ArtifactTypeUKI, osimage.V2ConfigUKI, []string{osimage.V2MediaTypeKernel, osimage.V2MediaTypeStub, zstd, zstd}, ""},
		// ironcore-image's V2 branch writes the stub last; the IEP text
		// names it between kernel and initrd: both are read.
		{"stub last", osimage.V2ArtifactTypeUKI, osimage.V2ConfigUKI, []string{osimage.V2MediaTypeKernel, zstd, zstd, osimage.V2MediaTypeStub}, ""},
		{"stub first", osimage.V2ArtifactTypeUKI, osimage.V2ConfigUKI, []string{osimage.V2MediaTypeStub, osimage.V2MediaTypeKernel, zstd}, ""},
		{"no stub", osimage.V2ArtifactTypeUKI, osimage.V2ConfigUKI, []string{osimage.V2MediaTypeKernel, zstd}, ""},
		{"two stubs", osimage.V2ArtifactTypeUKI, osimage.V2ConfigUKI, []string{osimage.V2MediaTypeKernel, osimage.V2MediaTypeStub, zstd, osimage.V2MediaTypeStub}, "2 stub layers, want 0..1"},
		{"stub in EFI", osimage.V2ArtifactTypeEFI, osimage.V2ConfigEFI, []string{osimage.V2MediaTypeEFIExecutable, osimage.V2MediaTypeStub}, "not one of the kind's"},
		{"EFI config on a UKI manifest", osimage.V2ArtifactTypeUKI, osimage.V2ConfigEFI, []string{osimage.V2MediaTypeKernel, zstd}, "config media type"},
		{"no initrd", osimage.V2ArtifactTypeUKI, osimage.V2ConfigUKI, []string{osimage.V2MediaTypeKernel}, "0 initrd layers, want 1 or more"},
		{"two kernels", osimage.V2ArtifactTypeUKI, osimage.V2ConfigUKI, []string{osimage.V2MediaTypeKernel, osimage.V2MediaTypeKernel, zstd}, "2 kernel layers, want 1"},
		{"qcow2 in a UKI", osimage.V2ArtifactTypeUKI, osimage.V2ConfigUKI, []string{osimage.V2MediaTypeKernel, osimage.V2MediaTypeDiskQcow2}, "not one of the kind's"},
		{"initrd before kernel", osimage.V2ArtifactTypeUKI, osimage.V2ConfigUKI, []string{zstd, osimage.V2MediaTypeKernel}, "comes after"},
		{"v1 layer in EFI", osimage.V2ArtifactTypeEFI, osimage.V2ConfigEFI, []string{osimage.MediaTypeUKI}, "not one of the kind's"},
		{"empty disk", osimage.V2ArtifactTypeDisk, osimage.V2ConfigDisk, nil, "0 disk layers"},
		{"not V2", osimage.ArtifactTypeV1, osimage.MediaTypeConfig, nil, "no IronCore Image V2 kind"},
	} {
		_, err := osimage.CheckV2Manifest(tc.at, tc.cfg, tc.layers)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// v2OnlyIndex is an index of the V2 manifests of dir alone, as another
// V2 publisher might make it.
func v2OnlyIndex(t *testing.T, dir string) v1.ImageIndex {
	t.Helper()
	imgs, err := osimage.NewV2Images(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	var adds []mutate.IndexAddendum
	for _, vi := range imgs {
		mf, _ := vi.Image.Manifest()
		adds = append(adds, mutate.IndexAddendum{Add: vi.Image, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}, ArtifactType: mf.ArtifactType}})
	}
	return mutate.AppendManifests(empty.Index, adds...)
}

// TestReadIndexIdentity: a dual index is read preferring V2 where it maps
// one to one (and says so); a V2-only index is read too; a v1-only reader
// in boot-operator's style finds nothing to boot in a V2-only index and
// says what it misses.
func TestReadIndexIdentity(t *testing.T) {
	dir := writeDir(t, "amd64")
	idx, err := osimage.NewIndexFromDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	id, err := osimage.ReadIndexIdentity(idx, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(id.Preferred, "uki from the EFI kind") || !strings.Contains(id.Preferred, "kernel from the UKI kind") || len(id.V2Kinds) != 3 {
		t.Errorf("dual index: preferred %q, kinds %v", id.Preferred, id.V2Kinds)
	}
	if d, _ := id.Artifact(osimage.KindUKI); d.MediaType != osimage.V2MediaTypeEFIExecutable {
		t.Errorf("uki artifact %s, want the EFI kind's", d.MediaType)
	}
	// Two initrd layers: pxe keeps v1's initrd.img.
	if d, _ := id.Artifact(osimage.KindInitrd); d.MediaType != osimage.MediaTypeInitramfs {
		t.Errorf("initrd artifact %s, want v1's", d.MediaType)
	}
	if id.Default != osimage.BootUEFIHTTP || id.Supports(osimage.BootPXE) != nil || id.Cmdline != osimagetest.Cmdline {
		t.Errorf("dual identity %+v", id)
	}
	if _, err := osimage.ReadIndexIdentity(idx, "arm64"); err == nil || !strings.Contains(err.Error(), "no image for linux/arm64 (it has linux/amd64)") {
		t.Errorf("arm64 of an amd64 index: %v", err)
	}

	only := v2OnlyIndex(t, dir)
	id, err = osimage.ReadIndexIdentity(only, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if id.Default != osimage.BootUEFIHTTP || fmt.Sprint(id.Methods) != "[uefi-http pxe disk]" ||
		!strings.HasPrefix(id.Preferred, "IronCore Image V2 only") || len(id.Initrds()) != 2 || id.Cmdline != osimagetest.Cmdline {
		t.Errorf("V2-only identity %+v", id)
	}
	if err := id.Supports(osimage.BootPXE); err == nil || !strings.Contains(err.Error(), "2 initrd layers") {
		t.Errorf("pxe from a V2 UKI kind of 2 initrds: %v", err)
	}
	view, err := osimagetest.ResolveLikeBootOperator(only, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if err := view.PXEReady(); err == nil {
		t.Error("boot-operator's reading of a V2-only index found PXE layers")
	}
	if err := view.HTTPReady(); err == nil || !strings.Contains(err.Error(), "UKI layer") {
		t.Errorf("boot-operator's reading of a V2-only index: %v", err)
	}
}

// TestReadIdentityRefusesDisagreeingV2: a manifest that claims a V2 kind
// but whose config is another kind's is refused, not read as v1.
func TestReadIdentityRefusesDisagreeingV2(t *testing.T) {
	imgs, err := osimage.NewV2Images(writeDir(t, "amd64"), nil)
	if err != nil {
		t.Fatal(err)
	}
	efi := imgs[1].Image
	bad := mutate.ConfigMediaType(efi, osimage.V2ConfigUKI)
	if mf, _ := bad.Manifest(); mf.ArtifactType != osimage.V2ArtifactTypeEFI {
		t.Fatalf("artifactType %q after the config change", mf.ArtifactType)
	}
	if _, err := osimage.ReadIdentity(bad); err == nil || !strings.Contains(err.Error(), "config media type") {
		t.Errorf("EFI manifest with a UKI config: %v", err)
	}
}

// TestReadIndexIdentityRefusesOtherPlatform: a reader picks an index entry
// by its platform and then boots what the manifest holds, so a manifest
// whose own architecture (V2 config, or annotation) is not its entry's is
// refused: an arm64 build listed as linux/amd64 (v1 and V2 manifests, v1
// alone), and V2 manifests whose annotation was made to agree with the
// entry but whose config still says arm64.
func TestReadIndexIdentityRefusesOtherPlatform(t *testing.T) {
	arm, err := osimage.NewIndexFromDirs(writeDir(t, "arm64"))
	if err != nil {
		t.Fatal(err)
	}
	v2arm, err := osimage.NewV2Images(writeDir(t, "arm64"), nil)
	if err != nil {
		t.Fatal(err)
	}
	asAMD64 := func(imgs []v1.Image) v1.ImageIndex {
		var adds []mutate.IndexAddendum
		for _, img := range imgs {
			mf, _ := img.Manifest()
			adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
				Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}, ArtifactType: mf.ArtifactType}})
		}
		return mutate.AppendManifests(empty.Index, adds...)
	}
	var relabelled []v1.Image
	for _, vi := range v2arm {
		relabelled = append(relabelled, mutate.Annotations(vi.Image, map[string]string{osimage.AnnotationArchitecture: "amd64"}).(v1.Image))
	}
	var v1Only []v1.Image
	for _, img := range indexImages(t, arm) {
		if mf, _ := img.Manifest(); mf.ArtifactType == osimage.ArtifactTypeV1 {
			v1Only = append(v1Only, img)
		}
	}
	if len(v1Only) != 1 {
		t.Fatalf("%d v1 manifests in the arm64 index, want 1", len(v1Only))
	}
	for _, tc := range []struct {
		name string
		idx  v1.ImageIndex
		want string
	}{
		{"arm64 build listed as amd64", asAMD64(indexImages(t, arm)), "architecture arm64, but the index lists it for linux/amd64"},
		{"arm64 v1 manifest listed as amd64", asAMD64(v1Only), "architecture arm64, but the index lists it for linux/amd64"},
		{"arm64 V2 configs, annotation amd64", asAMD64(relabelled), "config architecture arm64, annotation org.ironcore.image.architecture amd64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := osimage.ReadIndexIdentity(tc.idx, "amd64")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadIndexIdentity: %v; want a refusal (%s)", err, tc.want)
			}
		})
	}
}
