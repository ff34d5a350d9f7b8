package osimage

import (
	"fmt"
	"slices"
	"strings"
)

// IronCore Image V2 (IEP draft, ironcore-dev/enhancements PR #49,
// ieps/tbd-ironcore-image-v2.md): one manifest per boot kind, told apart
// by artifactType, each with its own config media type and layers. This
// table is the one place its strings live; docs/image-format.md quotes it
// (TestImageFormatDocV2Strings).

// V2Kind is a boot kind of IronCore Image V2.
type V2Kind string

const (
	// V2UKI is UKI component booting: kernel, optional stub, 1..N initrds
	// and a config with the command line and os-release.
	V2UKI V2Kind = "UKI"
	// V2EFI is a raw EFI executable (for us: the signed UKI as one blob).
	V2EFI V2Kind = "EFI"
	// V2Disk is a disk image as ordered qcow2 layers.
	V2Disk V2Kind = "Disk"
)

// V2Role is what a layer of a V2 manifest is.
type V2Role string

const (
	V2RoleKernel     V2Role = "kernel"
	V2RoleStub       V2Role = "stub"
	V2RoleInitrd     V2Role = "initrd"
	V2RoleExecutable V2Role = "executable"
	V2RoleDisk       V2Role = "disk"
)

// V2LayerSpec is one role of a kind's layers: its media types and how many
// layers of it a manifest holds (Max 0: no upper bound). AnyPosition: a
// layer of it may stand anywhere among the others (the table's place is
// where we write it).
type V2LayerSpec struct {
	Role        V2Role
	MediaTypes  []string
	Min, Max    int
	AnyPosition bool
}

// V2Spec is one V2 boot kind.
type V2Spec struct {
	Kind            V2Kind
	ArtifactType    string
	ConfigMediaType string
	// Layers in the order a manifest lists them (but AnyPosition ones).
	Layers []V2LayerSpec
}

// The V2 media types, as the IEP spells them.
const (
	V2ArtifactTypeUKI  = "application/vnd.ironcore+uki"
	V2ArtifactTypeEFI  = "application/vnd.ironcore+efi"
	V2ArtifactTypeDisk = "application/vnd.ironcore+disk"

	V2ConfigUKI  = "application/vnd.ironcore.config.uki.v2+json"
	V2ConfigEFI  = "application/vnd.ironcore.config.efi.v2+json"
	V2ConfigDisk = "application/vnd.ironcore.config.disk.v2+json"

	V2MediaTypeKernel        = "application/vnd.ironcore.kernel.efi"
	V2MediaTypeStub          = "application/vnd.ironcore.stub.efi"
	V2MediaTypeInitrd        = "application/vnd.ironcore.initrd.cpio"
	V2MediaTypeInitrdGzip    = "application/vnd.ironcore.initrd.cpio+gzip"
	V2MediaTypeInitrdZstd    = "application/vnd.ironcore.initrd.cpio+zstd"
	V2MediaTypeInitrdXz      = "application/vnd.ironcore.initrd.cpio+xz"
	V2MediaTypeInitrdLz4     = "application/vnd.ironcore.initrd.cpio+lz4"
	V2MediaTypeEFIExecutable = "application/vnd.ironcore.efi.executable"
	V2MediaTypeDiskQcow2     = "application/vnd.ironcore.disk.qcow2"
)

// v2Specs is the table: kinds in the order an index lists them (after the
// v1 manifest of the same platform).
var v2Specs = []V2Spec{
	{
		Kind: V2UKI, ArtifactType: V2ArtifactTypeUKI, ConfigMediaType: V2ConfigUKI,
		Layers: []V2LayerSpec{
			{Role: V2RoleKernel, MediaTypes: []string{V2MediaTypeKernel}, Min: 1, Max: 1},
			{Role: V2RoleInitrd, MediaTypes: []string{V2MediaTypeInitrd, V2MediaTypeInitrdGzip, V2MediaTypeInitrdZstd, V2MediaTypeInitrdXz, V2MediaTypeInitrdLz4}, Min: 1},
			// The stub last, as ironcore-image's V2 branch writes a UKI
			// image (kernel, initrds, stub); its reader, like the IEP,
			// places it nowhere in particular.
			{Role: V2RoleStub, MediaTypes: []string{V2MediaTypeStub}, Min: 0, Max: 1, AnyPosition: true},
		},
	},
	{
		Kind: V2EFI, ArtifactType: V2ArtifactTypeEFI, ConfigMediaType: V2ConfigEFI,
		Layers: []V2LayerSpec{{Role: V2RoleExecutable, MediaTypes: []string{V2MediaTypeEFIExecutable}, Min: 1, Max: 1}},
	},
	{
		Kind: V2Disk, ArtifactType: V2ArtifactTypeDisk, ConfigMediaType: V2ConfigDisk,
		Layers: []V2LayerSpec{{Role: V2RoleDisk, MediaTypes: []string{V2MediaTypeDiskQcow2}, Min: 1}},
	},
}

// v2SpecOf returns the V2 kind an artifactType names.
func v2SpecOf(artifactType string) (V2Spec, bool) {
	for _, s := range v2Specs {
		if s.ArtifactType == artifactType {
			return s, true
		}
	}
	return V2Spec{}, false
}

// V2Config is the config blob of every V2 kind. The UKI kind's fields are
// the IEP's (cmdline, osRelease, rebootMethod); the EFI and Disk configs
// are "{}" in the IEP. Every kind also carries the platform (os,
// architecture): ironcore-image's V2 branch reads a manifest's platform
// from its config.
type V2Config struct {
	Cmdline string `json:"cmdline,omitempty"`
	// OSRelease is the os-release file's text (KEY=value lines).
	OSRelease string `json:"osRelease,omitempty"`
	// RebootMethod "disk": boot from disk after a successful boot. We set
	// none: our in-memory boot does not reboot to disk.
	RebootMethod string `json:"rebootMethod,omitempty"`
	Architecture string `json:"architecture,omitempty"`
	OS           string `json:"os,omitempty"`
}

// CheckV2Manifest checks a manifest of artifactType against the table:
// its config media type, every layer's media type, the layers' order by
// role (but AnyPosition roles) and their counts. The error names the first
// disagreement.
func CheckV2Manifest(artifactType, configMediaType string, layerMediaTypes []string) (V2Spec, error) {
	spec, ok := v2SpecOf(artifactType)
	if !ok {
		return V2Spec{}, fmt.Errorf("artifactType %q is no IronCore Image V2 kind", artifactType)
	}
	if configMediaType != spec.ConfigMediaType {
		return spec, fmt.Errorf("%s manifest: config media type %q, want %s", spec.Kind, configMediaType, spec.ConfigMediaType)
	}
	counts := make([]int, len(spec.Layers))
	last := 0
	for i, mt := range layerMediaTypes {
		role := -1
		for r, ls := range spec.Layers {
			if slices.Contains(ls.MediaTypes, mt) {
				role = r
			}
		}
		if role < 0 {
			return spec, fmt.Errorf("%s manifest: layer %d has media type %q, not one of the kind's (%s)", spec.Kind, i, mt, strings.Join(spec.mediaTypes(), ", "))
		}
		counts[role]++
		if spec.Layers[role].AnyPosition {
			continue
		}
		if role < last {
			return spec, fmt.Errorf("%s manifest: layer %d (%s) comes after a %s layer", spec.Kind, i, spec.Layers[role].Role, spec.Layers[last].Role)
		}
		last = role
	}
	for r, ls := range spec.Layers {
		if counts[r] < ls.Min || ls.Max > 0 && counts[r] > ls.Max {
			want := fmt.Sprintf("%d..%d", ls.Min, ls.Max)
			if ls.Max == 0 {
				want = fmt.Sprintf("%d or more", ls.Min)
			} else if ls.Min == ls.Max {
				want = fmt.Sprint(ls.Min)
			}
			return spec, fmt.Errorf("%s manifest: %d %s layers, want %s", spec.Kind, counts[r], ls.Role, want)
		}
	}
	return spec, nil
}

func (s V2Spec) mediaTypes() []string {
	var out []string
	for _, l := range s.Layers {
		out = append(out, l.MediaTypes...)
	}
	return out
}

// roleOf returns the role of a layer media type in this kind.
func (s V2Spec) roleOf(mediaType string) (V2Role, bool) {
	for _, l := range s.Layers {
		if slices.Contains(l.MediaTypes, mediaType) {
			return l.Role, true
		}
	}
	return "", false
}

// initrdMediaType names an initrd's compression from its first bytes (the
// magic numbers of each format; a plain newc cpio starts "070701").
func initrdMediaType(head []byte) (string, error) {
	switch {
	case hasPrefix(head, 0x28, 0xb5, 0x2f, 0xfd):
		return V2MediaTypeInitrdZstd, nil
	case hasPrefix(head, 0x1f, 0x8b):
		return V2MediaTypeInitrdGzip, nil
	case hasPrefix(head, 0xfd, '7', 'z', 'X', 'Z', 0x00):
		return V2MediaTypeInitrdXz, nil
	case hasPrefix(head, 0x02, 0x21, 0x4c, 0x18), hasPrefix(head, 0x04, 0x22, 0x4d, 0x18):
		return V2MediaTypeInitrdLz4, nil
	case hasPrefix(head, '0', '7', '0', '7', '0', '1'), hasPrefix(head, '0', '7', '0', '7', '0', '2'):
		return V2MediaTypeInitrd, nil
	}
	return "", fmt.Errorf("initrd starts % x: not a cpio archive, plain or gzip/zstd/xz/lz4 compressed", head[:min(len(head), 8)])
}

func hasPrefix(b []byte, p ...byte) bool { return len(b) >= len(p) && string(b[:len(p)]) == string(p) }
