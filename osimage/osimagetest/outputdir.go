// Package osimagetest writes small, deterministic builder output directories
// (artifacts + a correct manifest.json) for tests of code that consumes them.
package osimagetest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ironcore-dev/os-builder/osimage"
)

// DefaultFiles maps each artifact kind to its conventional file name.
var DefaultFiles = map[osimage.ArtifactKind]string{
	osimage.KindKernel:  "vmlinuz",
	osimage.KindInitrd:  "initrd.img",
	osimage.KindRootfs:  "root.squashfs",
	osimage.KindCmdline: "cmdline",
	osimage.KindUKI:     "uki.efi",
	osimage.KindStub:    "stub.efi",
	osimage.KindDisk:    "disk.raw",
	osimage.KindISO:     "image.iso",
}

// AllKinds is every artifact kind, in builder output order.
var AllKinds = []osimage.ArtifactKind{
	osimage.KindKernel, osimage.KindInitrd, osimage.KindRootfs, osimage.KindCmdline,
	osimage.KindUKI, osimage.KindStub, osimage.KindDisk, osimage.KindISO,
}

// Cmdline is the command line the fake output directories carry.
const Cmdline = "console=ttyS0 osb.mode=memory"

// Content returns the deterministic bytes of a fake artifact: a few KiB
// derived from kind and arch, so that every artifact differs. The initrd
// has the shape of a real one (a plain newc cpio archive, then one that
// starts as zstd does) and the disk a whole number of 512-byte sectors,
// so that the V2 manifests can be made of them.
func Content(kind osimage.ArtifactKind, arch string) []byte {
	switch kind {
	case osimage.KindCmdline:
		return []byte(Cmdline + "\n")
	case osimage.KindInitrd:
		data := noise(kind, arch)
		out := append(cpioEntry("root.img", data[:1024]), cpioEntry("TRAILER!!!", nil)...)
		out = append(out, make([]byte, 512-len(out)%512)...)
		return append(append(out, 0x28, 0xb5, 0x2f, 0xfd), data[1024:]...)
	case osimage.KindDisk:
		data := noise(kind, arch)
		return append(data, make([]byte, 512-len(data)%512)...)
	}
	return noise(kind, arch)
}

func noise(kind osimage.ArtifactKind, arch string) []byte {
	seed := sha256.Sum256([]byte(string(kind) + "/" + arch))
	out := make([]byte, 0, 4096+int(seed[0]))
	for len(out) < cap(out) {
		seed = sha256.Sum256(seed[:])
		out = append(out, seed[:]...)
	}
	return out[:cap(out)]
}

// cpioEntry is one newc entry (header, name, data, each padded to 4 bytes).
func cpioEntry(name string, data []byte) []byte {
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		1, 0o100644, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	out := append([]byte(h), name...)
	out = append(out, 0)
	for len(out)%4 != 0 {
		out = append(out, 0)
	}
	out = append(out, data...)
	for len(out)%4 != 0 {
		out = append(out, 0)
	}
	return out
}

// WriteOutputDir writes the given artifact kinds (all when none) and a
// manifest.json for arch into dir and returns the manifest.
func WriteOutputDir(dir, arch string, kinds ...osimage.ArtifactKind) (*osimage.BuildManifest, error) {
	if len(kinds) == 0 {
		kinds = AllKinds
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	m := &osimage.BuildManifest{
		Recipe:          "hypervisor",
		Version:         "1.2.0",
		Architecture:    arch,
		SourceDateEpoch: 1700000000,
		Cmdline:         Cmdline,
		OSRelease:       map[string]string{"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"},
		Layers:          []string{"base", "libvirt"},
		ExcludedLayers:  []string{"debug"},
		Packages:        map[string]string{"systemd": "252.30-1~deb12u2"},
	}
	for _, k := range kinds {
		data := Content(k, arch)
		name := DefaultFiles[k]
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		m.Artifacts = append(m.Artifacts, osimage.Artifact{Kind: k, Path: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
	}
	if err := WriteManifest(dir, m); err != nil {
		return nil, err
	}
	return m, nil
}

// WriteManifest writes m as dir/manifest.json.
func WriteManifest(dir string, m *osimage.BuildManifest) error {
	raw, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, osimage.ManifestFile), append(raw, '\n'), 0o644)
}
