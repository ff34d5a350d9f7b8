package osimage_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/ironcore-dev/os-builder/ocistore"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
)

func TestReadIdentity(t *testing.T) {
	img, err := osimage.NewImage(writeDir(t, "arm64", osimage.KindUKI, osimage.KindDisk, osimage.KindCmdline), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := osimage.ReadIdentity(img)
	if err != nil {
		t.Fatal(err)
	}
	if id.Default != osimage.BootUEFIHTTP || id.Architecture != "arm64" || id.Cmdline != osimagetest.Cmdline ||
		id.ArtifactType != osimage.ArtifactTypeV1 || len(id.Methods) != 2 || len(id.InstallModes) != 2 {
		t.Errorf("identity = %+v", id)
	}
	if d, ok := id.Artifact(osimage.KindUKI); !ok || d.MediaType != osimage.MediaTypeUKI {
		t.Errorf("uki artifact = %+v, %v", d, ok)
	}
	if _, ok := id.Artifact(osimage.KindKernel); ok {
		t.Error("kernel artifact found in an image without one")
	}

	tests := []struct {
		method osimage.BootMethod
		err    string
	}{
		{osimage.BootUEFIHTTP, ""},
		{osimage.BootDisk, ""},
		{osimage.BootPXE, "image offers no kernel+initrd for pxe: it has cmdline, disk, uki"},
		{osimage.BootVirtualMedia, "image offers no iso for virtual-media: it has cmdline, disk, uki"},
		{"floppy", "unknown boot method"},
	}
	for _, tt := range tests {
		err := id.Supports(tt.method)
		if (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("Supports(%s) = %v, want %q", tt.method, err, tt.err)
		}
	}
	arts, err := id.ArtifactsFor(osimage.BootUEFIHTTP)
	if err != nil || len(arts) != 1 {
		t.Errorf("ArtifactsFor(uefi-http) = %v, %v", arts, err)
	}
}

func TestReadIdentityPXEArtifacts(t *testing.T) {
	img, err := osimage.NewImage(writeDir(t, "amd64", osimage.KindKernel, osimage.KindInitrd, osimage.KindRootfs, osimage.KindCmdline), nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := osimage.ReadIdentity(img)
	if err != nil {
		t.Fatal(err)
	}
	arts, err := id.ArtifactsFor(osimage.BootPXE)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []osimage.ArtifactKind{osimage.KindKernel, osimage.KindInitrd, osimage.KindRootfs, osimage.KindCmdline} {
		if _, ok := arts[k]; !ok {
			t.Errorf("pxe artifacts lack %s", k)
		}
	}
	if id.Supports(osimage.BootUEFIHTTP) == nil {
		t.Error("uefi-http supported without a UKI")
	}
}

func TestResolveLikeBootOperator(t *testing.T) {
	idx, err := osimage.NewIndexFromDirs(writeDir(t, "amd64"), writeDir(t, "arm64", osimage.KindUKI))
	if err != nil {
		t.Fatal(err)
	}
	v, err := osimagetest.ResolveLikeBootOperator(idx, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.PXEReady(); err != nil {
		t.Error(err)
	}
	if err := v.HTTPReady(); err != nil {
		t.Error(err)
	}
	if v.ISO == nil || v.ISO.MediaType != osimage.MediaTypeISO {
		t.Errorf("iso = %+v", v.ISO)
	}
	if v.CommandLine != osimagetest.Cmdline {
		t.Errorf("commandLine = %q", v.CommandLine)
	}
	arm, err := osimagetest.ResolveLikeBootOperator(idx, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	if arm.PXEReady() == nil || arm.HTTPReady() != nil {
		t.Errorf("arm64 view = %+v", arm)
	}
	if _, err := osimagetest.ResolveLikeBootOperator(idx, "riscv64"); err == nil {
		t.Error("riscv64 resolved")
	}
}

// TestReadRefusesTamperedBlobs: the readers do not rely on their image
// source to check manifest and config bytes. go-containerregistry's layout
// package (which does not) reads a layout whose config or manifest was
// changed in place, same size and valid JSON (the architecture swapped);
// ReadIdentity and ResolveLikeBootOperator refuse it with a digest mismatch.
func TestReadRefusesTamperedBlobs(t *testing.T) {
	for _, tc := range []struct {
		blob    string
		resolve bool // ResolveLikeBootOperator sees it (it has the manifest's descriptor)
		ident   bool // ReadIdentity sees it (it has only the image)
	}{
		{blob: "config", resolve: true, ident: true},
		{blob: "manifest", resolve: true},
	} {
		t.Run(tc.blob, func(t *testing.T) {
			idx, err := osimage.NewIndexFromDirs(writeDir(t, "amd64", osimage.KindUKI, osimage.KindCmdline))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			lp, err := layout.Write(dir, idx)
			if err != nil {
				t.Fatal(err)
			}
			im, _ := idx.IndexManifest()
			img, _ := idx.Image(im.Manifests[0].Digest)
			h := im.Manifests[0].Digest
			if tc.blob == "config" {
				h, _ = img.ConfigName()
			}
			p := filepath.Join(dir, "blobs", h.Algorithm, h.Hex)
			data, err := os.ReadFile(p)
			if err != nil || !bytes.Contains(data, []byte(`"amd64"`)) {
				t.Fatalf("%s: %v %s", tc.blob, err, data)
			}
			if err := os.WriteFile(p, bytes.Replace(data, []byte(`"amd64"`), []byte(`"arm64"`), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			read, err := lp.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			_, err = osimagetest.ResolveLikeBootOperator(read, "amd64")
			if tc.resolve != errors.Is(err, ocistore.ErrDigestMismatch) {
				t.Errorf("ResolveLikeBootOperator: err = %v, want a digest mismatch: %v", err, tc.resolve)
			}
			rimg, err := read.Image(h0(t, read))
			if err != nil {
				t.Fatal(err)
			}
			_, err = osimage.ReadIdentity(rimg)
			if tc.ident != errors.Is(err, ocistore.ErrDigestMismatch) {
				t.Errorf("ReadIdentity: err = %v, want a digest mismatch: %v", err, tc.ident)
			}
		})
	}
}

// h0 is the digest of an index's first manifest.
func h0(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	im, err := idx.IndexManifest()
	if err != nil || len(im.Manifests) == 0 {
		t.Fatalf("index: %v", err)
	}
	return im.Manifests[0].Digest
}
