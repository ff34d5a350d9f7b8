// Package recipe loads, validates and resolves os-builder recipes: a base OS
// plus an ordered list of layers, each layer in its own YAML file so that
// several recipes can share it.
package recipe

// Recipe is the top-level document passed to `builder build`.
type Recipe struct {
	// Name of the image, e.g. "hypervisor". Required.
	Name string `json:"name"`
	// Version of the image, free-form (e.g. "1.2.0"). Required.
	Version string `json:"version"`
	// Base is the distribution the image starts from. Required.
	Base Base `json:"base"`
	// Layers are layer files, relative to the recipe file, applied in order.
	Layers []string `json:"layers,omitempty"`
	// UnitsDir is where layer units are looked up, relative to the recipe
	// file. Default "../units".
	UnitsDir string `json:"unitsDir,omitempty"`
	// Kernel configures the live kernel command line.
	Kernel Kernel `json:"kernel,omitempty"`
	// Outputs chooses the artifacts: pxe (default), uki, disk, iso.
	Outputs []Output `json:"outputs,omitempty"`
	// Exclude names layers to leave out of this build (also settable from the
	// CLI); what was left out is recorded in the output manifest.
	Exclude []string `json:"exclude,omitempty"`
	// Disk shapes the disk image (output disk).
	Disk Disk `json:"disk,omitempty"`
	// Arch adds, per architecture, what only that architecture's image
	// gets: the kernel package is linux-image-amd64 or linux-image-arm64,
	// the serial console ttyS0 or ttyAMA0.
	Arch map[string]ArchSettings `json:"arch,omitempty"`
	// PersistRequired makes the init stop (FATAL) when the persisted paths
	// cannot be kept on a data partition, instead of booting with them on
	// tmpfs and a warning.
	PersistRequired bool `json:"persistRequired,omitempty"`
	// ImageV2 false makes builder push publish the v1 manifest alone,
	// without the IronCore Image V2 kinds (recorded in manifest.json as
	// noImageV2). Unset or true: both.
	ImageV2 *bool `json:"imageV2,omitempty"`
	// Prune leaves packaged files out of the image (dpkg path-exclude)
	// and removes generated ones; see prune.go.
	Prune Prune `json:"prune,omitempty"`

	// Resolved holds the layers after include resolution, in apply order.
	// Filled by Load; never read from YAML.
	Resolved []*Layer `json:"resolved,omitempty"`
	// Path is the recipe file this was loaded from. Filled by Load.
	Path string `json:"-"`

	// src remembers where every field came from, for located errors.
	src *sources
}

// Base is the distribution a recipe starts from.
type Base struct {
	// Distribution: only "debian" today.
	Distribution string `json:"distribution"`
	// Release: bookworm (default) or trixie.
	Release string `json:"release,omitempty"`
	// Architecture: amd64 (default) or arm64.
	Architecture string `json:"architecture,omitempty"`
	// Architectures builds the recipe for each of these (instead of
	// Architecture): one output per architecture, one index when pushed.
	// Load sets Architecture to the first; ForArchitecture picks another.
	Architectures []string `json:"architectures,omitempty"`
	// Mirror is the Debian archive URL; default http://deb.debian.org/debian.
	Mirror string `json:"mirror,omitempty"`
	// Components, default [main].
	Components []string `json:"components,omitempty"`
	// Packages installed by mmdebstrap on top of the "required" set.
	Packages []string `json:"packages,omitempty"`
}

// ArchSettings are what one architecture's image adds to the recipe.
type ArchSettings struct {
	// Packages are appended to base.packages.
	Packages []string `json:"packages,omitempty"`
	// Cmdline is appended to kernel.cmdline.
	Cmdline string `json:"cmdline,omitempty"`
}

// Disk shapes disk.raw.
type Disk struct {
	// DataSizeMiB is the size of the empty ext4 osb-data partition shipped
	// in disk.raw after osb-root; the init grows it to the end of a bigger
	// disk at first boot. 0: none. Default: DefaultDataSizeMiB when the
	// recipe persists paths, else 0 (see Recipe.DataSizeMiB).
	DataSizeMiB *int `json:"dataSizeMiB,omitempty"`
}

// DefaultDataSizeMiB is the data partition size of disk.raw when the recipe
// persists paths and does not say.
const DefaultDataSizeMiB = 256

// Bounds of disk.dataSizeMiB: ext4 needs a few MiB; the image is sparse,
// but a data partition beyond 1 TiB is surely a unit mistake.
const (
	MinDataSizeMiB = 8
	MaxDataSizeMiB = 1 << 20
)

// Kernel configures the kernel command line baked into boot artifacts.
type Kernel struct {
	// Cmdline is appended after the builder's own parameters.
	Cmdline string `json:"cmdline,omitempty"`
	// Modules are extra kernel modules to put into the initrd (with their
	// dependencies), beyond those the init needs.
	Modules []string `json:"modules,omitempty"`
}

// Layer is one composable piece of an image, in its own file.
type Layer struct {
	// Name, unique within a resolved recipe. Required.
	Name string `json:"name"`
	// Include lists other layer files (relative to this one) applied before
	// this layer. Each layer is applied once, at its first position.
	Include []string `json:"include,omitempty"`
	// Packages are Debian packages to install.
	Packages []string `json:"packages,omitempty"`
	// Files are copied from the repository into the image.
	Files []File `json:"files,omitempty"`
	// Units are systemd units from the units directory.
	Units []Unit `json:"units,omitempty"`
	// Users and Groups are created through systemd-sysusers.
	Users  []User  `json:"users,omitempty"`
	Groups []Group `json:"groups,omitempty"`
	// OCI extracts chosen paths from OCI images.
	OCI []OCISource `json:"oci,omitempty"`
	// Go builds Go programs from pinned module versions.
	Go []GoBuild `json:"go,omitempty"`
	// Cmdline is appended to the kernel command line.
	Cmdline string `json:"cmdline,omitempty"`
	// Persist lists paths kept on the node's data partition across boots
	// and reinstalls (bind-mounted over the read-only root by the init).
	Persist []string `json:"persist,omitempty"`

	// Path is the file this layer was loaded from. Filled by Load.
	Path string `json:"path,omitempty"`

	// filePins holds, for each source (by field) Pinned changed, the
	// digest the file itself gave ("" for none): Sources reports that one.
	filePins map[string]string
}

// File copies a file or directory tree from the repository into the image.
type File struct {
	// Source path, relative to the layer file. Required.
	Source string `json:"source"`
	// Destination absolute path in the image. Required.
	Destination string `json:"destination"`
	// Mode as an octal string, e.g. "0644". Default: the source's mode as
	// git keeps it (0644, or 0755 if executable; directories 0755).
	Mode string `json:"mode,omitempty"`
	// Owner and Group, names or numbers; default root.
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
}

// Unit installs a systemd unit file from the units directory.
type Unit struct {
	// Name of the unit file, e.g. "libvirt-provider.service". Required.
	Name string `json:"name"`
	// Enable creates the wants/requires links its [Install] section asks for.
	Enable bool `json:"enable,omitempty"`
}

// User is a system user, created with systemd-sysusers.
type User struct {
	Name string `json:"name"`
	// UID, optional; allocated by sysusers when absent.
	UID *int `json:"uid,omitempty"`
	// Group is the primary group; default a group of the user's name.
	Group string `json:"group,omitempty"`
	// Groups are supplementary groups.
	Groups []string `json:"groups,omitempty"`
	Home   string   `json:"home,omitempty"`
	Shell  string   `json:"shell,omitempty"`
	// Description is the GECOS field.
	Description string `json:"description,omitempty"`
}

// Group is a system group, created with systemd-sysusers.
type Group struct {
	Name string `json:"name"`
	GID  *int   `json:"gid,omitempty"`
}

// OCISource copies paths out of an OCI image's flattened filesystem.
type OCISource struct {
	// Image reference with an explicit registry: host/repo:tag, pinned to
	// a digest by the recipe's lock file, or host/repo[:tag]@sha256:...,
	// pinned here (and the lock must agree).
	Image string `json:"image"`
	// Paths maps a path in the image to a path in the built OS.
	Paths map[string]string `json:"paths"`
}

// GoBuild builds a Go program from a pinned module version with
// `go build -trimpath`.
type GoBuild struct {
	// Module path, e.g. github.com/ironcore-dev/libvirt-provider. Required.
	Module string `json:"module"`
	// Version, an exact module version (no "latest"). Required.
	Version string `json:"version"`
	// Sum is the module's go.sum hash ("h1:..."). Usually left to the
	// recipe's lock file; when set here the lock must agree. The download
	// is checked against the pinned sum; dependencies are always checked
	// against the module's own go.sum.
	Sum string `json:"sum,omitempty"`
	// Package inside the module, e.g. "./cmd/libvirt-provider"; default ".".
	Package string `json:"package,omitempty"`
	// Binary is the destination path in the image. Required.
	Binary string `json:"binary"`
	// CGO enables cgo (off by default).
	CGO bool `json:"cgo,omitempty"`
	// Tags are build tags.
	Tags []string `json:"tags,omitempty"`
	// Ldflags are passed to the linker.
	Ldflags string `json:"ldflags,omitempty"`
}
