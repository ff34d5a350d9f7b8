package osimagetest

import (
	"encoding/json"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/osimage"
)

// This file is the tests' reader of IronCore Image V2, written from the
// IEP draft's text (ironcore-dev/enhancements PR #49,
// ieps/tbd-ironcore-image-v2.md) and the ironcore-image V2 branch's way of
// finding a manifest (artifactType + platform). Its strings are spelled
// out here, not taken from package osimage: it checks that table.

// iepKinds is the IEP text: per artifactType, the config media type and
// the layer media types with how many of each a manifest holds.
var iepKinds = map[string]struct {
	kind   string
	config string
	layers []iepLayer
}{
	"application/vnd.ironcore+uki": {"UKI", "application/vnd.ironcore.config.uki.v2+json", []iepLayer{
		{"kernel", 1, 1, []string{"application/vnd.ironcore.kernel.efi"}},
		{"stub", 0, 1, []string{"application/vnd.ironcore.stub.efi"}},
		{"initrd", 1, -1, []string{
			"application/vnd.ironcore.initrd.cpio",
			"application/vnd.ironcore.initrd.cpio+gzip",
			"application/vnd.ironcore.initrd.cpio+zstd",
			"application/vnd.ironcore.initrd.cpio+xz",
			"application/vnd.ironcore.initrd.cpio+lz4",
		}},
	}},
	"application/vnd.ironcore+efi": {"EFI", "application/vnd.ironcore.config.efi.v2+json", []iepLayer{
		{"executable", 1, 1, []string{"application/vnd.ironcore.efi.executable"}},
	}},
	"application/vnd.ironcore+disk": {"Disk", "application/vnd.ironcore.config.disk.v2+json", []iepLayer{
		{"disk", 1, -1, []string{"application/vnd.ironcore.disk.qcow2"}},
	}},
}

type iepLayer struct {
	role     string
	min, max int // max -1: any number
	types    []string
}

// V2View is one V2 manifest as the IEP reads it.
type V2View struct {
	Kind     string
	Manifest v1.Descriptor
	Image    v1.Image
	// Config is the config blob's fields the IEP names.
	Config struct {
		Cmdline      string `json:"cmdline"`
		OSRelease    string `json:"osRelease"`
		RebootMethod string `json:"rebootMethod"`
	}
	// Layers by role (kernel, stub, initrd, executable, disk), in order.
	Layers map[string][]v1.Descriptor
}

// ReadV2 finds the manifest of artifactType for arch in idx, as the V2
// branch of ironcore-image does (first index entry with that artifactType
// and platform linux/arch), and reads it by the IEP: config media type,
// every layer's media type, and the count of each.
func ReadV2(idx v1.ImageIndex, artifactType, arch string) (*V2View, error) {
	spec, ok := iepKinds[artifactType]
	if !ok {
		return nil, fmt.Errorf("%q is no IEP kind", artifactType)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	var target *v1.Descriptor
	for i := range im.Manifests {
		d := &im.Manifests[i]
		if d.ArtifactType == artifactType && d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == arch {
			target = d
			break
		}
	}
	if target == nil {
		return nil, fmt.Errorf("no %s manifest for linux/%s in the index", spec.kind, arch)
	}
	img, err := idx.Image(target.Digest)
	if err != nil {
		return nil, fmt.Errorf("fetch %s manifest: %w", spec.kind, err)
	}
	if err := osimage.VerifyManifest(img, *target); err != nil {
		return nil, err
	}
	mf, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	if mf.ArtifactType != artifactType {
		return nil, fmt.Errorf("%s manifest: its artifactType is %q, the index says %q", spec.kind, mf.ArtifactType, artifactType)
	}
	if string(mf.Config.MediaType) != spec.config {
		return nil, fmt.Errorf("%s manifest: config media type %q, the IEP says %s", spec.kind, mf.Config.MediaType, spec.config)
	}
	v := &V2View{Kind: spec.kind, Manifest: *target, Image: img, Layers: map[string][]v1.Descriptor{}}
	for _, l := range mf.Layers {
		role := ""
		for _, sl := range spec.layers {
			for _, t := range sl.types {
				if string(l.MediaType) == t {
					role = sl.role
				}
			}
		}
		if role == "" {
			return nil, fmt.Errorf("%s manifest: layer %s has media type %q, which the IEP does not give this kind", spec.kind, l.Digest, l.MediaType)
		}
		v.Layers[role] = append(v.Layers[role], l)
	}
	for _, sl := range spec.layers {
		if n := len(v.Layers[sl.role]); n < sl.min || sl.max >= 0 && n > sl.max {
			return nil, fmt.Errorf("%s manifest: %d %s layers (the IEP: %d to %s)", spec.kind, n, sl.role, sl.min, strings.Replace(fmt.Sprint(sl.max), "-1", "N", 1))
		}
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("%s config: %w", spec.kind, err)
	}
	if h, n, _ := v1.SHA256(strings.NewReader(string(raw))); h != mf.Config.Digest || n != mf.Config.Size {
		return nil, fmt.Errorf("%s config: digest %s (%d bytes), manifest says %s (%d)", spec.kind, h, n, mf.Config.Digest, mf.Config.Size)
	}
	if err := json.Unmarshal(raw, &v.Config); err != nil {
		return nil, fmt.Errorf("%s config: %w", spec.kind, err)
	}
	return v, nil
}

// IEPArtifactTypes are the three kinds' artifactTypes, in the IEP's order.
var IEPArtifactTypes = []string{"application/vnd.ironcore+uki", "application/vnd.ironcore+efi", "application/vnd.ironcore+disk"}
