// Package osimage defines how an os-builder image declares its boot identity
// in OCI terms: the media types of its artifacts, the annotations that say how
// it boots, and the config blob. It is the one contract shared by the builder
// (which writes it) and the boot driver (which reads it); docs/image-format.md
// describes it for humans.
package osimage

// Layer media types. The first six are the ones IronCore's boot-operator
// resolves today; an image must stay consumable that way unchanged.
const (
	MediaTypeKernel    = "application/vnd.ironcore.image.kernel"
	MediaTypeInitramfs = "application/vnd.ironcore.image.initramfs"
	MediaTypeSquashfs  = "application/vnd.ironcore.image.squashfs"
	MediaTypeUKI       = "application/vnd.ironcore.image.uki"
	MediaTypeISO       = "application/vnd.ironcore.image.iso"
	MediaTypeRootfs    = "application/vnd.ironcore.image.rootfs"
	// MediaTypeDisk is a raw GPT disk image (ESP with the UKI + root partition).
	MediaTypeDisk = "application/vnd.ironcore.image.disk"
	// MediaTypeInitramfsNoRoot is the initrd without a root image inside
	// (see KindInitrdNoRoot); boot-operator does not know it and skips it.
	MediaTypeInitramfsNoRoot = "application/vnd.ironcore.os-builder.initramfs.noroot"
	// MediaTypeCmdline is the kernel command line as a plain-text layer, so a
	// PXE consumer need not parse the config.
	MediaTypeCmdline = "application/vnd.ironcore.image.cmdline"
	// MediaTypeStub is the systemd-stub the UKI is made of (see KindStub);
	// boot-operator does not know it and skips it.
	MediaTypeStub = "application/vnd.ironcore.os-builder.stub.efi"
	// MediaTypeManifestJSON is the builder's own manifest.json (artifacts,
	// sizes, digests, package versions, excluded layers).
	MediaTypeManifestJSON = "application/vnd.ironcore.os-builder.manifest.v1+json"

	// MediaTypeConfig is the config blob: {"commandLine": "..."} plus our
	// additions (boot identity), a superset of boot-operator's.
	MediaTypeConfig = "application/vnd.ironcore.image.config.v1+json"
)

// ArtifactTypeV1 is the artifactType of our v1 manifest (every artifact
// in one manifest). It is of our own namespace on purpose: the V2 kinds'
// artifactTypes (v2.go) are what a V2 reader matches on, and a v1 manifest
// claiming one (ours did, application/vnd.ironcore+uki) would be taken for
// a V2 manifest whose layers are all wrong.
const ArtifactTypeV1 = "application/vnd.ironcore.os-builder.image.v1"

// BootMethod is how a server boots an artifact.
type BootMethod string

const (
	// BootUEFIHTTP boots the UKI over native UEFI HTTP boot.
	BootUEFIHTTP BootMethod = "uefi-http"
	// BootPXE boots kernel + initrd (+ root image) via PXE/iPXE.
	BootPXE BootMethod = "pxe"
	// BootVirtualMedia boots the ISO inserted through Redfish Virtual Media.
	BootVirtualMedia BootMethod = "virtual-media"
	// BootDisk boots what is installed on the server's disk.
	BootDisk BootMethod = "disk"
)

// InstallMode is what the initrd's installer does with the OS.
type InstallMode string

const (
	// InstallMemory runs the OS from RAM (read-only root + tmpfs overlay).
	InstallMemory InstallMode = "memory"
	// InstallDisk writes the disk image to a target disk and reboots into it.
	InstallDisk InstallMode = "disk"
)

// Annotation keys. Manifest-level keys describe the image; layer-level keys
// describe one artifact.
const (
	// AnnotationBootMethods: comma-separated BootMethods the image supports.
	AnnotationBootMethods = "org.ironcore.image.boot.methods"
	// AnnotationBootDefault: the BootMethod used when the caller forces none.
	AnnotationBootDefault = "org.ironcore.image.boot.default"
	// AnnotationInstallModes: comma-separated InstallModes the initrd offers.
	AnnotationInstallModes = "org.ironcore.image.install.modes"
	// AnnotationArchitecture: amd64, arm64.
	AnnotationArchitecture = "org.ironcore.image.architecture"
	// AnnotationCmdline: the kernel command line baked into the artifacts.
	AnnotationCmdline = "org.ironcore.image.cmdline"
	// AnnotationRecipe and AnnotationRecipeVersion name what was built.
	AnnotationRecipe        = "org.ironcore.image.recipe"
	AnnotationRecipeVersion = "org.ironcore.image.recipe.version"
	// AnnotationOSReleasePrefix + lowercased os-release key (id, version_id,
	// pretty_name) carries os-release fields.
	AnnotationOSReleasePrefix = "org.ironcore.image.os-release."
	// AnnotationExcludedLayers: comma-separated layers left out of this build.
	AnnotationExcludedLayers = "org.ironcore.image.excluded-layers"
	// AnnotationSecureBoot: "unsigned", or "signed sha256:CERT [pcrsig]"
	// (SecureBoot.String) for images with UKI-bearing artifacts.
	AnnotationSecureBoot = "org.ironcore.image.secureboot"

	// AnnotationArtifactBoot (layer-level): the BootMethod this artifact serves.
	AnnotationArtifactBoot = "org.ironcore.image.artifact.boot"
	// AnnotationTitle (layer-level) is the artifact's file name.
	AnnotationTitle = "org.opencontainers.image.title"
)
