package osimage

// ManifestFile is the name of the build manifest in an output directory.
const ManifestFile = "manifest.json"

// ArtifactKind says what one output file is.
type ArtifactKind string

const (
	KindKernel ArtifactKind = "kernel" // vmlinuz
	KindInitrd ArtifactKind = "initrd" // initrd.img (zstd newc cpio, root image inside)
	KindRootfs ArtifactKind = "rootfs" // root.squashfs, the read-only root on its own
	// KindInitrdNoRoot is initrd-noroot.img: the same init and modules with
	// no root image inside, for boots that take the root from a partition
	// or a URL (osb.root=...) and for network installs.
	KindInitrdNoRoot ArtifactKind = "initrd-noroot"
	KindCmdline      ArtifactKind = "cmdline" // cmdline, plain text
	KindUKI          ArtifactKind = "uki"     // uki.efi
	// KindStub is stub.efi: the image's systemd-stub the UKI is made of,
	// for readers that assemble their own UKI (IronCore Image V2's UKI
	// kind carries it as its stub layer).
	KindStub ArtifactKind = "stub"
	KindDisk ArtifactKind = "disk" // disk.raw, GPT
	KindISO  ArtifactKind = "iso"  // image.iso, El Torito EFI
)

// BuildManifest is manifest.json: what a build produced and from what. The
// builder writes it last, after every artifact is in place, so its presence
// marks a complete output directory.
type BuildManifest struct {
	Recipe          string            `json:"recipe"`
	Version         string            `json:"version"`
	Architecture    string            `json:"architecture"`
	SourceDateEpoch int64             `json:"sourceDateEpoch"`
	Cmdline         string            `json:"cmdline"`
	OSRelease       map[string]string `json:"osRelease,omitempty"`
	// Layers applied, in order; ExcludedLayers were left out on purpose.
	Layers         []string `json:"layers"`
	ExcludedLayers []string `json:"excludedLayers,omitempty"`
	// Packages maps each installed Debian package to its version.
	Packages map[string]string `json:"packages,omitempty"`
	// Sources are the OCI images and Go modules built in, each with the
	// digest used and where that digest came from.
	Sources []Source `json:"sources,omitempty"`
	// Init is the initrd's init the build used.
	Init *InitInfo `json:"init,omitempty"`
	// GoPrograms are the Go programs the build compiled into the image (and
	// the initrd's init), each with the modules its binary records: what
	// the SBOM lists as Go components.
	GoPrograms []GoProgram `json:"goPrograms,omitempty"`
	// Prune is what the recipe left out of the packages it installed
	// (prune): Packages still lists every package, dpkg's database every
	// file, and `dpkg --verify` in the image names these paths missing.
	Prune *Prune `json:"prune,omitempty"`
	// OCISources are the images the build took files from.
	OCISources []OCISource `json:"ociSources,omitempty"`
	Artifacts  []Artifact  `json:"artifacts"`
	// InputKey is the digest of everything the build read (recipe, its
	// files, the builder, the toolchain): a build with the same key and
	// these artifacts unchanged has nothing to do.
	InputKey string `json:"inputKey,omitempty"`
	// SecureBoot says whether the UKI-bearing artifacts (uki.efi, disk.raw,
	// image.iso) are signed; nil when the build made none of them.
	SecureBoot *SecureBoot `json:"secureBoot,omitempty"`
	// NoImageV2: the recipe turned IronCore Image V2 off (imageV2: false):
	// push publishes the v1 manifest alone.
	NoImageV2 bool `json:"noImageV2,omitempty"`
}

// Prune is the effective prune lists of the recipe: dpkg path-exclude
// and path-include patterns (the defaults expanded), and what was removed
// after the packages were configured.
type Prune struct {
	Exclude []string `json:"exclude,omitempty"`
	Include []string `json:"include,omitempty"`
	Remove  []string `json:"remove,omitempty"`
}

// Source is one OCI image ("oci") or Go module ("go") of a layer. Ref is
// as the recipe names it; Digest the image digest or module sum used;
// Origin "recipe" (pinned in the layer file), "lock" (the recipe's lock
// file) or "resolved" (neither: resolved by this build, not reproducible
// until locked).
type Source struct {
	Layer  string `json:"layer"`
	Kind   string `json:"kind"`
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	Origin string `json:"origin"`
}

// InitInfo identifies the init (cmd/init) inside the initrds: whichever way
// the builder got it (carried inside, built from a source tree or from the
// module), the same sha256 means the same init.
type InitInfo struct {
	SHA256    string `json:"sha256"`              // hex
	GoVersion string `json:"goVersion,omitempty"` // the toolchain that built it
}

// GoProgram is one Go binary in the image and what it was built from,
// read from the binary's own build information (as `go version -m`).
type GoProgram struct {
	// Path is where the binary is installed ("/init" for the initrd's).
	Path      string `json:"path"`
	GoVersion string `json:"goVersion"`
	// Main is the main module; Deps are the modules linked in, sorted.
	Main GoModule   `json:"main"`
	Deps []GoModule `json:"deps,omitempty"`
}

// GoModule is a module path at a version with its go.sum hash (empty for
// the main module of a local build).
type GoModule struct {
	Path    string `json:"path"`
	Version string `json:"version"`
	Sum     string `json:"sum,omitempty"`
}

// OCISource is an image files were taken from: the reference as the
// recipe pins it (name@sha256:...) and the image paths taken.
type OCISource struct {
	Image string   `json:"image"`
	Paths []string `json:"paths"`
}

// SecureBoot is how a build signed its UKIs.
type SecureBoot struct {
	// Signed: Authenticode-signed (--sign-key); false means firmware that
	// enforces Secure Boot refuses them.
	Signed bool `json:"signed"`
	// Certificate is the signing certificate's subject, CertificateSHA256
	// the SHA-256 of its DER: the entry firmware's db must hold.
	Certificate       string `json:"certificate,omitempty"`
	CertificateSHA256 string `json:"certificateSHA256,omitempty"`
	// PCRSignature: the UKIs carry .pcrsig and .pcrpkey (PCR 11 measured
	// boot; RSA keys only).
	PCRSignature bool `json:"pcrSignature"`
}

// String is the one-line form used in the OCI annotation and by inspect:
// "unsigned", or "signed" with the certificate fingerprint.
func (s *SecureBoot) String() string {
	switch {
	case s == nil:
		return ""
	case !s.Signed:
		return "unsigned"
	}
	v := "signed"
	if s.CertificateSHA256 != "" {
		v += " sha256:" + s.CertificateSHA256
	}
	if s.PCRSignature {
		v += " pcrsig"
	}
	return v
}

// Artifact is one file of an output directory.
type Artifact struct {
	Kind   ArtifactKind `json:"kind"`
	Path   string       `json:"path"` // relative to the output directory
	Size   int64        `json:"size"`
	SHA256 string       `json:"sha256"` // hex
}
