package osimage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/ocistore"
)

// BootIdentity is what a boot driver needs to know about one image manifest
// (one architecture): how it can boot and which layers each method uses.
type BootIdentity struct {
	Methods      []BootMethod
	Default      BootMethod
	InstallModes []InstallMode
	Architecture string
	Cmdline      string
	Recipe       string
	Version      string
	ArtifactType string
	// Created is the org.opencontainers.image.created annotation (RFC 3339).
	Created string
	// SecureBoot is the AnnotationSecureBoot value; empty for images
	// without UKIs or built before it existed.
	SecureBoot string
	// V2Kinds are the IronCore Image V2 kinds the identity was read from
	// (ReadIndexIdentity), in index order; Preferred says, in one line,
	// what V2 supplied over the v1 manifest (empty: nothing).
	V2Kinds   []V2Kind
	Preferred string

	artifacts map[ArtifactKind]v1.Descriptor
	// initrds are the V2 UKI kind's initrd layers, in order.
	initrds []v1.Descriptor
}

// Initrds returns the V2 UKI kind's initrd layers, in the order the kernel
// unpacks them (nil for v1 images).
func (b *BootIdentity) Initrds() []v1.Descriptor { return slices.Clone(b.initrds) }

// ReadIdentity reads the boot identity of an image manifest: a v1 one, or
// one IronCore Image V2 kind (V2KindOf). Images without
// our annotations (e.g. older ones made for boot-operator) still work: the
// methods are then derived from the layer media types, and the command line
// comes from the config's commandLine. The config is checked against the
// manifest's descriptor; checking the manifest is the caller's (it has the
// descriptor: VerifyManifest).
func ReadIdentity(img v1.Image) (*BootIdentity, error) {
	mf, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("read image manifest: %w", err)
	}
	if kind, isV2, err := V2KindOf(mf); err != nil {
		return nil, err
	} else if isV2 {
		return readV2Identity(img, mf, kind)
	}
	id := &BootIdentity{
		artifacts:    map[ArtifactKind]v1.Descriptor{},
		Architecture: mf.Annotations[AnnotationArchitecture],
		Cmdline:      mf.Annotations[AnnotationCmdline],
		Recipe:       mf.Annotations[AnnotationRecipe],
		Version:      mf.Annotations[AnnotationRecipeVersion],
		Created:      mf.Annotations[AnnotationCreated],
		SecureBoot:   mf.Annotations[AnnotationSecureBoot],
		ArtifactType: mf.ArtifactType,
	}
	present := map[ArtifactKind]bool{}
	for _, l := range mf.Layers {
		kind, ok := kindOf(string(l.MediaType))
		if !ok {
			continue
		}
		if _, dup := id.artifacts[kind]; !dup {
			id.artifacts[kind] = l
			present[kind] = true
		}
	}

	raw, err := verifiedConfig(img, mf)
	if err != nil {
		return nil, err
	}
	var cfg ImageConfig
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, fmt.Errorf("parse image config: %w", err)
		}
	}
	if cfg.CommandLine != "" {
		id.Cmdline = cfg.CommandLine
	}
	if id.Architecture, err = manifestArch(id.Architecture, cfg.Architecture); err != nil {
		return nil, err
	}

	derived, derivedDefault, derivedModes := DeriveBoot(present)
	if s := mf.Annotations[AnnotationBootMethods]; s != "" {
		for _, m := range strings.Split(s, ",") {
			id.Methods = append(id.Methods, BootMethod(strings.TrimSpace(m)))
		}
	} else {
		id.Methods = derived
	}
	id.Default = BootMethod(mf.Annotations[AnnotationBootDefault])
	if id.Default == "" {
		id.Default = derivedDefault
	}
	if s := mf.Annotations[AnnotationInstallModes]; s != "" {
		for _, m := range strings.Split(s, ",") {
			id.InstallModes = append(id.InstallModes, InstallMode(strings.TrimSpace(m)))
		}
	} else {
		id.InstallModes = derivedModes
	}
	return id, nil
}

// Artifact returns the layer descriptor of an artifact kind.
func (b *BootIdentity) Artifact(kind ArtifactKind) (v1.Descriptor, bool) {
	d, ok := b.artifacts[kind]
	return d, ok
}

// Kinds lists the artifact kinds the image has, sorted.
func (b *BootIdentity) Kinds() []ArtifactKind {
	var ks []ArtifactKind
	for k := range b.artifacts {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

// Supports says whether the image can boot with method m; the error names
// what is missing and what the image has instead.
func (b *BootIdentity) Supports(m BootMethod) error {
	needs, known := methodNeeds[m]
	if !known {
		return fmt.Errorf("unknown boot method %q (known: uefi-http, pxe, virtual-media, disk)", m)
	}
	var missing []string
	for _, k := range needs {
		if _, ok := b.artifacts[k]; !ok {
			missing = append(missing, string(k))
		}
	}
	if len(missing) > 0 && m == BootPXE && len(b.initrds) > 1 {
		return fmt.Errorf("image offers pxe as a V2 UKI kind with %d initrd layers: this reader boots one initrd", len(b.initrds))
	}
	if len(missing) > 0 {
		var need []string
		for _, k := range needs {
			need = append(need, string(k))
		}
		have := strings.ReplaceAll(joinStrings(b.Kinds()), ",", ", ")
		if have == "" {
			have = "no boot artifacts"
		}
		return fmt.Errorf("image offers no %s for %s: it has %s", strings.Join(need, "+"), m, have)
	}
	for _, declared := range b.Methods {
		if declared == m {
			return nil
		}
	}
	return fmt.Errorf("image has the artifacts for %s but does not declare it (declares %s)", m, strings.ReplaceAll(joinStrings(b.Methods), ",", ", "))
}

// ArtifactsFor returns the layer descriptors boot method m uses: the required
// ones plus, for pxe, the root squashfs and cmdline layers when present.
func (b *BootIdentity) ArtifactsFor(m BootMethod) (map[ArtifactKind]v1.Descriptor, error) {
	if err := b.Supports(m); err != nil {
		return nil, err
	}
	out := map[ArtifactKind]v1.Descriptor{}
	for _, k := range methodNeeds[m] {
		out[k] = b.artifacts[k]
	}
	if m == BootPXE {
		for _, k := range []ArtifactKind{KindRootfs, KindCmdline} {
			if d, ok := b.artifacts[k]; ok {
				out[k] = d
			}
		}
	}
	return out, nil
}

// VerifyManifest checks that img's manifest bytes are the ones d (its
// entry in an index) records. Readers here do not rely on the image's
// source for that: go-containerregistry's layout package, for one, trusts
// the files it reads.
func VerifyManifest(img v1.Image, d v1.Descriptor) error {
	if d.Size > ocistore.MaxManifestSize {
		return fmt.Errorf("manifest %s: size %d is over the %d-byte limit", d.Digest, d.Size, ocistore.MaxManifestSize)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return fmt.Errorf("read manifest %s: %w", d.Digest, err)
	}
	return checkBytes("manifest "+d.Digest.String(), raw, d)
}

// verifiedConfig reads img's config, bounded by and checked against the
// manifest's config descriptor.
func verifiedConfig(img v1.Image, mf *v1.Manifest) ([]byte, error) {
	if mf.Config.Size > ocistore.MaxManifestSize {
		return nil, fmt.Errorf("image config: size %d is over the %d-byte limit", mf.Config.Size, ocistore.MaxManifestSize)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return nil, fmt.Errorf("read image config: %w", err)
	}
	if err := checkBytes("image config", raw, mf.Config); err != nil {
		return nil, err
	}
	return raw, nil
}

func checkBytes(name string, b []byte, d v1.Descriptor) error {
	_, err := io.Copy(io.Discard, ocistore.NewVerifyingReader(io.NopCloser(bytes.NewReader(b)), name, d.Digest, d.Size))
	return err
}
