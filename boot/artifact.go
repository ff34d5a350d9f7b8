// Package boot turns an image's boot identity (osimage.ReadIdentity, the one
// reader of the image contract) into a boot plan (ordered steps as data) and
// drives a server's BMC through that plan; Session is that sequence for one
// boot. It has no Kubernetes dependencies: the metal-operator is one
// consumer, a CLI another.
package boot

import (
	"strings"

	"github.com/ironcore-dev/os-builder/osimage"
)

// Artifact is one image layer as the plan publishes it.
type Artifact struct {
	Kind      osimage.ArtifactKind `json:"kind"`
	MediaType string               `json:"mediaType"`
	Digest    string               `json:"digest"` // "sha256:<hex>" of the blob as stored
	Size      int64                `json:"size"`
	// Name is the file name served to the server; it keeps the extension
	// firmware looks at (.efi, .iso).
	Name string `json:"name"`
}

// artifactOf returns the plan's view of the image's layer of a kind. The name
// is the layer's title; images made by other tools may lack one, so the
// fallback still ends in the extension firmware looks at.
func artifactOf(id *osimage.BootIdentity, kind osimage.ArtifactKind) Artifact {
	d, _ := id.Artifact(kind)
	name := d.Annotations[osimage.AnnotationTitle]
	if name == "" || strings.ContainsAny(name, "/\\") {
		switch kind {
		case osimage.KindUKI:
			name = "uki.efi"
		case osimage.KindISO:
			name = "image.iso"
		default:
			name = string(kind)
		}
	}
	return Artifact{Kind: kind, MediaType: string(d.MediaType), Digest: d.Digest.String(), Size: d.Size, Name: name}
}
