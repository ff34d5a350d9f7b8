package osimagetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/ocistore"
	"github.com/ironcore-dev/os-builder/osimage"
)

// This file is the tests' model of IronCore boot-operator: an independent
// reading of our images the way that consumer reads them, used by tests
// only (the published images are also checked with IronCore's own
// ironcore-image tool, publish/ironcoreimage_test.go).

// BootOperatorView is what IronCore boot-operator resolves from an image:
// each field is nil when boot-operator would not find that layer.
type BootOperatorView struct {
	Manifest    v1.Descriptor
	Kernel      *v1.Descriptor
	Initrd      *v1.Descriptor
	Squashfs    *v1.Descriptor
	UKI         *v1.Descriptor
	ISO         *v1.Descriptor
	CommandLine string
}

// PXEReady fails where boot-operator's PXE controller fails: it needs all of
// kernel, initramfs and squashfs.
func (v *BootOperatorView) PXEReady() error {
	if v.Kernel == nil || v.Initrd == nil || v.Squashfs == nil {
		return errors.New("boot-operator would not find all of kernel, initramfs and squashfs layers")
	}
	return nil
}

// HTTPReady fails where boot-operator's HTTP boot controller fails.
func (v *BootOperatorView) HTTPReady() error {
	if v.UKI == nil {
		return errors.New("boot-operator would not find a UKI layer")
	}
	return nil
}

// ResolveLikeBootOperator resolves an index the way IronCore boot-operator
// does, as an independent check that our images stay consumable by it:
// the first index entry whose platform.architecture equals arch (no OS or
// variant match, entries without platform skipped), then layers purely by
// media type. Its PXE path keeps the last kernel/initramfs/squashfs layer it
// sees, its UKI path the first UKI layer; its virtual-media path takes the
// first layer that has the ISO media type or a title ending in ".iso" (and a
// lone layer as a fallback). The command line is the config's commandLine.
func ResolveLikeBootOperator(idx v1.ImageIndex, arch string) (*BootOperatorView, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	var target *v1.Descriptor
	for i := range im.Manifests {
		if p := im.Manifests[i].Platform; p != nil && p.Architecture == arch {
			target = &im.Manifests[i]
			break
		}
	}
	if target == nil {
		return nil, fmt.Errorf("failed to find target manifest with architecture %s", arch)
	}
	img, err := idx.Image(target.Digest)
	if err != nil {
		return nil, fmt.Errorf("fetch nested manifest: %w", err)
	}
	if err := osimage.VerifyManifest(img, *target); err != nil {
		return nil, err
	}
	mf, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("parse nested manifest: %w", err)
	}
	view := &BootOperatorView{Manifest: *target}
	for i := range mf.Layers {
		l := &mf.Layers[i]
		switch string(l.MediaType) {
		case osimage.MediaTypeKernel:
			view.Kernel = l
		case osimage.MediaTypeInitramfs:
			view.Initrd = l
		case osimage.MediaTypeSquashfs:
			view.Squashfs = l
		case osimage.MediaTypeUKI:
			if view.UKI == nil {
				view.UKI = l
			}
		}
		if view.ISO == nil && (string(l.MediaType) == osimage.MediaTypeISO || strings.HasSuffix(l.Annotations[osimage.AnnotationTitle], ".iso")) {
			view.ISO = l
		}
	}
	if view.ISO == nil && len(mf.Layers) == 1 {
		view.ISO = &mf.Layers[0]
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	// Checked against the manifest, as the registry client boot-operator
	// uses checks blobs.
	if h, n, _ := v1.SHA256(bytes.NewReader(raw)); h != mf.Config.Digest || n != mf.Config.Size {
		return nil, fmt.Errorf("config: %w: %s (%d bytes), manifest says %s (%d bytes)", ocistore.ErrDigestMismatch, h, n, mf.Config.Digest, mf.Config.Size)
	}
	var cfg struct {
		CommandLine string `json:"commandLine"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("decode config: %w", err)
	}
	view.CommandLine = cfg.CommandLine
	return view, nil
}
