package osimage_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
)

func writeDir(t *testing.T, arch string, kinds ...osimage.ArtifactKind) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := osimagetest.WriteOutputDir(dir, arch, kinds...); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestNewImageManifest(t *testing.T) {
	dir := writeDir(t, "amd64")
	img, err := osimage.NewImage(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkBlobs(t, img)
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if mf.ArtifactType != osimage.ArtifactTypeV1 {
		t.Errorf("artifactType = %q, want %q", mf.ArtifactType, osimage.ArtifactTypeV1)
	}
	if mf.Config.MediaType != osimage.MediaTypeConfig {
		t.Errorf("config media type = %q", mf.Config.MediaType)
	}
	wantTypes := []string{osimage.MediaTypeKernel, osimage.MediaTypeInitramfs, osimage.MediaTypeSquashfs,
		osimage.MediaTypeCmdline, osimage.MediaTypeUKI, osimage.MediaTypeStub, osimage.MediaTypeDisk, osimage.MediaTypeISO, osimage.MediaTypeManifestJSON}
	var gotTypes []string
	for _, l := range mf.Layers {
		gotTypes = append(gotTypes, string(l.MediaType))
		if l.Annotations[osimage.AnnotationTitle] == "" {
			t.Errorf("layer %s has no title", l.MediaType)
		}
	}
	if !reflect.DeepEqual(gotTypes, wantTypes) {
		t.Errorf("layer media types:\n got %v\nwant %v", gotTypes, wantTypes)
	}
	// The layer digest is the file's sha256, as recorded in manifest.json.
	m, _ := osimage.ReadManifest(dir)
	for _, a := range m.Artifacts {
		mt, _ := osimage.MediaTypeOf(a.Kind)
		found := false
		for _, l := range mf.Layers {
			if string(l.MediaType) == mt {
				found = true
				if l.Digest.Hex != a.SHA256 || l.Size != a.Size {
					t.Errorf("%s: layer %s/%d, artifact %s/%d", a.Kind, l.Digest.Hex, l.Size, a.SHA256, a.Size)
				}
			}
		}
		if !found {
			t.Errorf("no layer for %s", a.Kind)
		}
	}
	wantAnn := map[string]string{
		osimage.AnnotationBootMethods:                     "uefi-http,pxe,virtual-media,disk",
		osimage.AnnotationBootDefault:                     "uefi-http",
		osimage.AnnotationInstallModes:                    "memory,disk",
		osimage.AnnotationArchitecture:                    "amd64",
		osimage.AnnotationCmdline:                         osimagetest.Cmdline,
		osimage.AnnotationRecipe:                          "hypervisor",
		osimage.AnnotationRecipeVersion:                   "1.2.0",
		osimage.AnnotationExcludedLayers:                  "debug",
		osimage.AnnotationCreated:                         "2023-11-14T22:13:20Z",
		osimage.AnnotationOSReleasePrefix + "id":          "debian",
		osimage.AnnotationOSReleasePrefix + "version_id":  "12",
		osimage.AnnotationOSReleasePrefix + "pretty_name": "Debian GNU/Linux 12 (bookworm)",
	}
	if !reflect.DeepEqual(mf.Annotations, wantAnn) {
		t.Errorf("annotations:\n got %v\nwant %v", mf.Annotations, wantAnn)
	}
	raw, _ := img.RawConfigFile()
	var cfg osimage.ImageConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.CommandLine != osimagetest.Cmdline || cfg.DefaultBoot != osimage.BootUEFIHTTP || cfg.Architecture != "amd64" {
		t.Errorf("config = %+v", cfg)
	}
}

func TestDeriveBoot(t *testing.T) {
	K := func(ks ...osimage.ArtifactKind) map[osimage.ArtifactKind]bool {
		m := map[osimage.ArtifactKind]bool{}
		for _, k := range ks {
			m[k] = true
		}
		return m
	}
	tests := []struct {
		name    string
		kinds   map[osimage.ArtifactKind]bool
		methods string
		def     osimage.BootMethod
		modes   string
	}{
		{"all", K(osimagetest.AllKinds...), "uefi-http,pxe,virtual-media,disk", osimage.BootUEFIHTTP, "memory,disk"},
		{"pxe only", K(osimage.KindKernel, osimage.KindInitrd, osimage.KindRootfs), "pxe", osimage.BootPXE, "memory"},
		{"kernel without initrd", K(osimage.KindKernel, osimage.KindISO), "virtual-media", osimage.BootVirtualMedia, ""},
		{"disk only", K(osimage.KindDisk), "disk", osimage.BootDisk, "disk"},
		{"uki only", K(osimage.KindUKI), "uefi-http", osimage.BootUEFIHTTP, "memory"},
		{"nothing bootable", K(osimage.KindCmdline), "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			methods, def, modes := osimage.DeriveBoot(tt.kinds)
			var ms, mo []string
			for _, m := range methods {
				ms = append(ms, string(m))
			}
			for _, m := range modes {
				mo = append(mo, string(m))
			}
			if strings.Join(ms, ",") != tt.methods || def != tt.def || strings.Join(mo, ",") != tt.modes {
				t.Errorf("got %v %q %v", ms, def, mo)
			}
		})
	}
}

func TestNewImageReproducible(t *testing.T) {
	// Two directories with the same content (different paths, different
	// mtimes) give the same manifest and index digests.
	d1 := writeDir(t, "amd64")
	d2 := writeDir(t, "amd64")
	var digests []v1.Hash
	for _, d := range []string{d1, d2} {
		idx, err := osimage.NewIndexFromDirs(d)
		if err != nil {
			t.Fatal(err)
		}
		h, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, h)
	}
	if digests[0] != digests[1] {
		t.Errorf("index digests differ: %s vs %s", digests[0], digests[1])
	}
}

func TestIndexPlatforms(t *testing.T) {
	idx, err := osimage.NewIndexFromDirs(writeDir(t, "arm64"), writeDir(t, "amd64", osimage.KindKernel, osimage.KindInitrd, osimage.KindRootfs))
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range indexImages(t, idx) {
		checkBlobs(t, img)
	}
	im, _ := idx.IndexManifest()
	// Per architecture the v1 manifest first, then the V2 kinds its
	// artifacts make (amd64 has no uki.efi or disk.raw).
	wants := []struct{ arch, at string }{
		{"amd64", osimage.ArtifactTypeV1}, {"amd64", osimage.V2ArtifactTypeUKI},
		{"arm64", osimage.ArtifactTypeV1}, {"arm64", osimage.V2ArtifactTypeUKI}, {"arm64", osimage.V2ArtifactTypeEFI}, {"arm64", osimage.V2ArtifactTypeDisk},
	}
	if len(im.Manifests) != len(wants) {
		t.Fatalf("%d manifests, want %d", len(im.Manifests), len(wants))
	}
	for i, want := range wants {
		d := im.Manifests[i]
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != want.arch || d.ArtifactType != want.at {
			t.Errorf("entry %d: platform %+v artifactType %q, want linux/%s %s", i, d.Platform, d.ArtifactType, want.arch, want.at)
		}
	}
	if _, err := osimage.NewIndexFromDirs(writeDir(t, "amd64"), writeDir(t, "amd64")); err == nil {
		t.Error("two amd64 images: no error")
	}
}

func TestDigestMismatchWhileStreaming(t *testing.T) {
	dir := writeDir(t, "amd64")
	// Same size, different bytes: only the stream check can notice.
	p := filepath.Join(dir, "vmlinuz")
	data, _ := os.ReadFile(p)
	data[0] ^= 0xff
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := osimage.NewImage(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	mf, _ := img.Manifest()
	l, err := img.LayerByDigest(mf.Layers[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	if !errors.Is(err, osimage.ErrDigestMismatch) || !strings.Contains(err.Error(), "vmlinuz") {
		t.Errorf("err = %v, want a digest mismatch naming vmlinuz", err)
	}
}

func TestNewImageRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(dir string, m *osimage.BuildManifest)
		want   string
	}{
		{"size mismatch", func(dir string, m *osimage.BuildManifest) { m.Artifacts[0].Size++ }, "manifest.json says"},
		{"missing file", func(dir string, m *osimage.BuildManifest) { os.Remove(filepath.Join(dir, "vmlinuz")) }, "vmlinuz"},
		{"path escapes", func(dir string, m *osimage.BuildManifest) { m.Artifacts[0].Path = "../vmlinuz" }, "not inside"},
		{"bad sha", func(dir string, m *osimage.BuildManifest) { m.Artifacts[0].SHA256 = "xyz" }, "64 hex"},
		{"unknown kind", func(dir string, m *osimage.BuildManifest) { m.Artifacts[0].Kind = "firmware" }, "unknown kind"},
		{"no arch", func(dir string, m *osimage.BuildManifest) { m.Architecture = "" }, "no architecture"},
		{"nothing bootable", func(dir string, m *osimage.BuildManifest) { m.Artifacts = m.Artifacts[3:4] }, "no boot method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeDir(t, "amd64")
			m, err := osimage.ReadManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			tt.mutate(dir, m)
			if err := osimagetest.WriteManifest(dir, m); err != nil {
				t.Fatal(err)
			}
			_, err = osimage.NewImage(dir, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// checkBlobs reads every blob of img and checks that it hashes to the digest
// and size its descriptor claims (what go-containerregistry's validate
// package would do, without its extra dependency).
func checkBlobs(t *testing.T, img v1.Image) {
	t.Helper()
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := img.RawConfigFile()
	if h, n, _ := v1.SHA256(bytes.NewReader(raw)); h != mf.Config.Digest || n != mf.Config.Size {
		t.Errorf("config blob %s/%d, descriptor %s/%d", h, n, mf.Config.Digest, mf.Config.Size)
	}
	for _, d := range mf.Layers {
		l, err := img.LayerByDigest(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		h, n, err := v1.SHA256(rc)
		rc.Close()
		if err != nil || h != d.Digest || n != d.Size {
			t.Errorf("layer %s: blob %s/%d (%v), descriptor %s/%d", d.MediaType, h, n, err, d.Digest, d.Size)
		}
	}
}

func indexImages(t *testing.T, idx v1.ImageIndex) []v1.Image {
	t.Helper()
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var imgs []v1.Image
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := img.Digest(); got != d.Digest {
			t.Errorf("index entry %s, image digest %s", d.Digest, got)
		}
		imgs = append(imgs, img)
	}
	return imgs
}
