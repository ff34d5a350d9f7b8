package osimage

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// V2KindOf says whether a manifest is an IronCore Image V2 manifest and
// which kind: its artifactType is a V2 kind's and its config is not our
// v1 config (our v1 manifests once carried application/vnd.ironcore+uki;
// they are still read as v1). A V2 manifest that disagrees with the table
// (config media type, layer media types or counts) is an error.
func V2KindOf(mf *v1.Manifest) (V2Kind, bool, error) {
	spec, ok := v2SpecOf(mf.ArtifactType)
	if !ok || string(mf.Config.MediaType) == MediaTypeConfig {
		return "", false, nil
	}
	var mts []string
	for _, l := range mf.Layers {
		mts = append(mts, string(l.MediaType))
	}
	if _, err := CheckV2Manifest(mf.ArtifactType, string(mf.Config.MediaType), mts); err != nil {
		return spec.Kind, true, err
	}
	return spec.Kind, true, nil
}

// readV2Identity reads the boot identity of one V2 manifest: the EFI
// kind's executable is the UKI uefi-http boots, the UKI kind's kernel and
// initrds are what pxe boots, the Disk kind declares
// disk boot (its qcow2 is no raw disk an installer writes: it is not
// mapped to the disk artifact).
func readV2Identity(img v1.Image, mf *v1.Manifest, kind V2Kind) (*BootIdentity, error) {
	raw, err := verifiedConfig(img, mf)
	if err != nil {
		return nil, err
	}
	var cfg V2Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("%s manifest: parse config: %w", kind, err)
	}
	arch, err := manifestArch(mf.Annotations[AnnotationArchitecture], cfg.Architecture)
	if err != nil {
		return nil, fmt.Errorf("%s manifest: %w", kind, err)
	}
	spec, _ := v2SpecOfKind(kind)
	id := &BootIdentity{
		artifacts:    map[ArtifactKind]v1.Descriptor{},
		Architecture: arch,
		Cmdline:      cfg.Cmdline,
		Recipe:       mf.Annotations[AnnotationRecipe],
		Version:      mf.Annotations[AnnotationRecipeVersion],
		Created:      mf.Annotations[AnnotationCreated],
		ArtifactType: mf.ArtifactType,
		V2Kinds:      []V2Kind{kind},
	}
	for _, l := range mf.Layers {
		role, _ := spec.roleOf(string(l.MediaType))
		switch role {
		case V2RoleExecutable:
			id.artifacts[KindUKI] = l
		case V2RoleKernel:
			id.artifacts[KindKernel] = l
		case V2RoleStub:
			id.artifacts[KindStub] = l
		case V2RoleInitrd:
			id.initrds = append(id.initrds, l)
		}
	}
	if len(id.initrds) == 1 {
		id.artifacts[KindInitrd] = id.initrds[0]
	}
	switch kind {
	case V2EFI:
		id.Methods = []BootMethod{BootUEFIHTTP}
	case V2UKI:
		// Declared with any number of initrds: Supports says why a reader
		// that boots one initrd cannot take several.
		id.Methods = []BootMethod{BootPXE}
	case V2Disk:
		id.Methods = []BootMethod{BootDisk}
	}
	id.finishV2()
	return id, nil
}

// finishV2 orders the methods, picks the default and the install modes.
func (b *BootIdentity) finishV2() {
	sort.Slice(b.Methods, func(i, j int) bool {
		return slices.Index(methodOrder, b.Methods[i]) < slices.Index(methodOrder, b.Methods[j])
	})
	b.Methods = slices.Compact(b.Methods)
	if len(b.Methods) > 0 && b.Default == "" {
		b.Default = b.Methods[0]
	}
	b.InstallModes = nil
	if slices.Contains(b.Methods, BootUEFIHTTP) || slices.Contains(b.Methods, BootPXE) {
		b.InstallModes = append(b.InstallModes, InstallMemory)
	}
}

// ReadIndexIdentity reads the boot identity of linux/arch from an index
// that holds a v1 manifest, V2 manifests, or both. With both, V2 is
// preferred where it maps one to one (the EFI kind's executable for
// uefi-http, the UKI kind's kernel, and its initrd when it has one) and the
// rest comes from the v1 manifest; Preferred says what was taken from V2.
// Every manifest read is checked against its index entry.
func ReadIndexIdentity(idx v1.ImageIndex, arch string) (*BootIdentity, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read index: %w", err)
	}
	var (
		v1Img  v1.Image
		v1Desc v1.Descriptor
		v2Ids  []*BootIdentity
		others []string
	)
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		if d.Platform == nil || d.Platform.Architecture != arch {
			if d.Platform != nil {
				others = append(others, d.Platform.OS+"/"+d.Platform.Architecture)
			}
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("read manifest %s: %w", d.Digest, err)
		}
		if err := VerifyManifest(img, d); err != nil {
			return nil, err
		}
		mf, err := img.Manifest()
		if err != nil {
			return nil, fmt.Errorf("parse manifest %s: %w", d.Digest, err)
		}
		kind, isV2, err := V2KindOf(mf)
		if err != nil {
			return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
		}
		if !isV2 {
			if v1Img == nil {
				v1Img, v1Desc = img, d
			}
			continue
		}
		if slices.ContainsFunc(v2Ids, func(id *BootIdentity) bool { return id.V2Kinds[0] == kind }) {
			continue // the first of a kind, as a V2 reader takes it
		}
		id, err := readV2Identity(img, mf, kind)
		if err == nil {
			err = checkPlatformArch(id, d.Platform)
		}
		if err != nil {
			return nil, fmt.Errorf("manifest %s: %w", d.Digest, err)
		}
		v2Ids = append(v2Ids, id)
	}
	if v1Img == nil && len(v2Ids) == 0 {
		slices.Sort(others)
		return nil, fmt.Errorf("index has no image for linux/%s (it has %s)", arch, orNone(strings.Join(slices.Compact(others), ", ")))
	}
	var id *BootIdentity
	if v1Img != nil {
		if id, err = ReadIdentity(v1Img); err != nil {
			return nil, err
		}
		if err := checkPlatformArch(id, v1Desc.Platform); err != nil {
			return nil, fmt.Errorf("manifest %s: %w", v1Desc.Digest, err)
		}
	} else {
		id = &BootIdentity{artifacts: map[ArtifactKind]v1.Descriptor{}, Architecture: arch}
	}
	var took []string
	for _, v2 := range v2Ids {
		id.V2Kinds = append(id.V2Kinds, v2.V2Kinds[0])
		for _, k := range []ArtifactKind{KindUKI, KindKernel, KindInitrd} {
			if d, ok := v2.artifacts[k]; ok {
				id.artifacts[k] = d
				took = append(took, fmt.Sprintf("%s from the %s kind", k, v2.V2Kinds[0]))
			}
		}
		if v2.V2Kinds[0] == V2UKI {
			id.initrds = v2.initrds
			if v2.Cmdline != "" || id.Cmdline == "" {
				id.Cmdline = v2.Cmdline
			}
		}
		if v1Img == nil {
			id.Methods = append(id.Methods, v2.Methods...)
			id.ArtifactType = v2.ArtifactType
			id.Recipe, id.Version, id.Created = v2.Recipe, v2.Version, v2.Created
		}
	}
	if v1Img == nil {
		id.finishV2()
		id.Preferred = "IronCore Image V2 only (" + joinStrings(id.V2Kinds) + ")"
	} else if len(took) > 0 {
		id.Preferred = "IronCore Image V2 preferred over v1 for linux/" + arch + ": " + strings.Join(took, ", ") + "; the rest from the v1 manifest"
	}
	return id, nil
}

// manifestArch is a manifest's own architecture: its annotation's and its
// config's, which must agree when both are set.
func manifestArch(annotation, config string) (string, error) {
	if annotation != "" && config != "" && annotation != config {
		return "", fmt.Errorf("config architecture %s, annotation %s %s", config, AnnotationArchitecture, annotation)
	}
	if config != "" {
		return config, nil
	}
	return annotation, nil
}

// checkPlatformArch refuses a manifest whose own architecture is not its
// index entry's: a reader picks the entry by platform and boots what the
// manifest holds, so an arm64 image listed as linux/amd64 would be booted
// on amd64 machines.
func checkPlatformArch(id *BootIdentity, p *v1.Platform) error {
	if id.Architecture != "" && id.Architecture != p.Architecture {
		return fmt.Errorf("architecture %s, but the index lists it for %s/%s", id.Architecture, p.OS, p.Architecture)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
