// Package boot turns an image's boot identity into a boot plan (ordered steps
// as data) and drives a server's BMC through that plan. It has no Kubernetes
// dependencies: the metal-operator is one consumer, a CLI another.
package boot

import (
	"fmt"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/osimage"
)

// Identity is what the boot driver needs to know about an image: which boot
// methods it offers, which it prefers, and where its artifacts are. It is the
// driver's own view, read from the manifest annotations and layer media types
// (see IdentityFromManifest), so the driver does not depend on how
// osimage.ReadIdentity evolves; an adapter from osimage.BootIdentity is a
// few lines.
type Identity struct {
	// Reference names the image for messages (e.g. registry/repo@sha256:...).
	Reference string `json:"reference,omitempty"`
	// Methods the image supports, in the order it lists them.
	Methods []osimage.BootMethod `json:"methods"`
	// Default is the method used when the caller forces none.
	Default osimage.BootMethod `json:"default"`
	// Cmdline is the kernel command line; the iPXE script passes it explicitly.
	Cmdline string `json:"cmdline,omitempty"`
	// Artifacts are the image's layers that matter for booting.
	Artifacts []Artifact `json:"artifacts"`
}

// Artifact is one boot-relevant layer of an image.
type Artifact struct {
	Kind      osimage.ArtifactKind `json:"kind"`
	MediaType string               `json:"mediaType"`
	Digest    string               `json:"digest"` // "sha256:<hex>" of the blob as stored
	Size      int64                `json:"size"`
	// Name is the file name served to the server; it keeps the extension
	// firmware looks at (.efi, .iso).
	Name string `json:"name"`
}

// kindByMediaType maps the layer media types of the osimage contract to
// artifact kinds and default file names.
var kindByMediaType = map[string]struct {
	kind osimage.ArtifactKind
	name string
}{
	osimage.MediaTypeKernel:    {osimage.KindKernel, "vmlinuz"},
	osimage.MediaTypeInitramfs: {osimage.KindInitrd, "initrd.img"},
	osimage.MediaTypeSquashfs:  {osimage.KindRootfs, "root.squashfs"},
	osimage.MediaTypeRootfs:    {osimage.KindRootfs, "root.squashfs"},
	osimage.MediaTypeUKI:       {osimage.KindUKI, "uki.efi"},
	osimage.MediaTypeISO:       {osimage.KindISO, "image.iso"},
	osimage.MediaTypeDisk:      {osimage.KindDisk, "disk.raw"},
	osimage.MediaTypeCmdline:   {osimage.KindCmdline, "cmdline"},
}

// methodPreference orders methods when the image names no default.
var methodPreference = []osimage.BootMethod{osimage.BootUEFIHTTP, osimage.BootPXE, osimage.BootVirtualMedia, osimage.BootDisk}

// ReadIdentity reads the identity of an image from its manifest.
func ReadIdentity(img v1.Image, reference string) (*Identity, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("reading manifest of %s: %w", reference, err)
	}
	id, err := IdentityFromManifest(m)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", reference, err)
	}
	id.Reference = reference
	return id, nil
}

// IdentityFromManifest derives the identity from manifest annotations and
// layer media types. Without a methods annotation, the methods are inferred
// from the artifacts present; without a default, the first supported method
// in the order uefi-http, pxe, virtual-media, disk is the default.
func IdentityFromManifest(m *v1.Manifest) (*Identity, error) {
	id := &Identity{Cmdline: m.Annotations[osimage.AnnotationCmdline]}
	for _, l := range m.Layers {
		k, ok := kindByMediaType[string(l.MediaType)]
		if !ok {
			continue
		}
		name := k.name
		if t := l.Annotations[osimage.AnnotationTitle]; t != "" && !strings.ContainsAny(t, "/\\") {
			name = t
		}
		id.Artifacts = append(id.Artifacts, Artifact{Kind: k.kind, MediaType: string(l.MediaType), Digest: l.Digest.String(), Size: l.Size, Name: name})
	}
	if s := m.Annotations[osimage.AnnotationBootMethods]; s != "" {
		for _, f := range strings.Split(s, ",") {
			meth := osimage.BootMethod(strings.TrimSpace(f))
			if !slices.Contains(methodPreference, meth) {
				return nil, fmt.Errorf("annotation %s names unknown boot method %q", osimage.AnnotationBootMethods, meth)
			}
			id.Methods = append(id.Methods, meth)
		}
	} else {
		for _, meth := range methodPreference {
			if id.hasArtifactsFor(meth) {
				id.Methods = append(id.Methods, meth)
			}
		}
	}
	if len(id.Methods) == 0 {
		return nil, fmt.Errorf("image declares no boot method and has no boot artifacts")
	}
	id.Default = osimage.BootMethod(m.Annotations[osimage.AnnotationBootDefault])
	if id.Default == "" {
		for _, meth := range methodPreference {
			if slices.Contains(id.Methods, meth) {
				id.Default = meth
				break
			}
		}
	}
	if !slices.Contains(id.Methods, id.Default) {
		return nil, fmt.Errorf("default boot method %q is not among the image's methods %v", id.Default, id.Methods)
	}
	return id, nil
}

// Artifact returns the first artifact of the given kind.
func (id *Identity) Artifact(kind osimage.ArtifactKind) (Artifact, bool) {
	for _, a := range id.Artifacts {
		if a.Kind == kind {
			return a, true
		}
	}
	return Artifact{}, false
}

// hasArtifactsFor says whether the artifacts a method needs are present.
// Disk boot needs nothing from the image: it boots what is installed.
func (id *Identity) hasArtifactsFor(m osimage.BootMethod) bool {
	has := func(k osimage.ArtifactKind) bool { _, ok := id.Artifact(k); return ok }
	switch m {
	case osimage.BootUEFIHTTP:
		return has(osimage.KindUKI)
	case osimage.BootPXE:
		return has(osimage.KindKernel) && has(osimage.KindInitrd)
	case osimage.BootVirtualMedia:
		return has(osimage.KindISO)
	case osimage.BootDisk:
		return has(osimage.KindDisk)
	}
	return false
}

// offers describes what the image has, for error messages: "uki, disk".
func (id *Identity) offers() string {
	var s []string
	for _, k := range []osimage.ArtifactKind{osimage.KindUKI, osimage.KindKernel, osimage.KindInitrd, osimage.KindISO, osimage.KindDisk} {
		if _, ok := id.Artifact(k); ok {
			s = append(s, string(k))
		}
	}
	if len(s) == 0 {
		return "no boot artifacts"
	}
	return strings.Join(s, ", ")
}
