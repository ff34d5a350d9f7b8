package step

import (
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// Binary is one file produced by an oci or go step, bound for Dest in the
// root.
type Binary struct {
	Src, Dest string
	Step      string
	StepKey   string // the input key of the step: Src is a function of it
}

// LayerImage is the image every layer step leaves in its output; the live
// initrd carries it as an uncompressed cpio segment.
const LayerImage = "layer.squashfs"

// Names of the root's layers in the initrd's root layers directory, bottom
// first by name.
const (
	BaseLayer     = "00-base"
	BinariesLayer = "01-binaries"
	TopLayer      = "02-layers"
)

// Layer is a layer step's output directory and the layer's name in the
// live initrd.
type Layer struct {
	Dir, Name string
}

// Image is the layer's squashfs image.
func (l Layer) Image() string { return filepath.Join(l.Dir, LayerImage) }

// Stack is the root's layers so far, bottom first, and the input key of
// the top one, which chains the keys of the ones under it ("" for a stack
// no step builds on: the whole root).
type Stack struct {
	Layers []Layer
	Key    string
}

// On returns the stack with l, made by the step keyed key, on top.
func (s Stack) On(l Layer, key string) Stack {
	return Stack{Layers: append(append([]Layer(nil), s.Layers...), l), Key: key}
}

// Dirs are the layers' step outputs, bottom first.
func (s Stack) Dirs() []string {
	var dirs []string
	for _, l := range s.Layers {
		dirs = append(dirs, l.Dir)
	}
	return dirs
}

// Images are the layers' images, bottom first (the root stack's parts).
func (s Stack) Images() []string {
	var imgs []string
	for _, l := range s.Layers {
		imgs = append(imgs, l.Image())
	}
	return imgs
}

// Files the kernel step leaves in its output directory.
const (
	KernelImage   = "vmlinuz"
	KernelRelease = "kernel-release"
	ModulesDir    = "modules"
)

// Kernel is the kernel step's output: the kernel, its release and the
// initrd's modules.
type Kernel struct{ Dir string }

// Image is the kernel image.
func (k Kernel) Image() string { return filepath.Join(k.Dir, KernelImage) }

// Modules is the tree of the initrd's modules.
func (k Kernel) Modules() string { return filepath.Join(k.Dir, ModulesDir) }

// Release reads the kernel's release (uname -r), inside the kernel step's
// directory (fsroot: a link there does not read a file elsewhere).
func (k Kernel) Release() (string, error) {
	b, err := fsroot.ReadFileIn(k.Dir, KernelRelease, 4<<10)
	return strings.TrimSpace(string(b)), err
}

// Files the assemble step lifts out of the tree into its output directory,
// beside its layer.
const (
	OSReleaseFile = "os-release"
	StubFile      = "linuxx64.efi.stub" // the image's own stub, whatever its architecture (arm64: linuxaa64.efi.stub in the tree)
	InitrdFiles   = "initrd-files"      // userspace tools for the init, with their libraries
	InitrdList    = "initrd-files.list"
)

// Assembled is the assemble step's output: the root's top layer and what
// later steps need from the whole tree.
type Assembled struct{ Dir string }

// OSRelease is the image's os-release.
func (a Assembled) OSRelease() string { return filepath.Join(a.Dir, OSReleaseFile) }

// Stub is the image's systemd-stub.
func (a Assembled) Stub() string { return filepath.Join(a.Dir, StubFile) }

// InitrdFile is the initrd the initrd-noroot step writes.
const InitrdFile = "initrd.img"

// PackagesList is the bootstrap step's list of installed packages
// (name TAB version per line).
const PackagesList = "packages.tsv"
