package builder

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/isoimage"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/uki"
)

// outputSet is the artifacts a recipe asks for.
type outputSet map[string]bool

var knownOutputs = []string{"pxe", "uki", "disk", "iso"}

func parseOutputs(names []string) (outputSet, error) {
	if len(names) == 0 {
		names = []string{"pxe"}
	}
	set := outputSet{}
	for _, n := range names {
		ok := false
		for _, k := range knownOutputs {
			ok = ok || n == k
		}
		if !ok {
			return nil, fmt.Errorf("outputs: unknown output %q (want one of %s)", n, strings.Join(knownOutputs, ", "))
		}
		set[n] = true
	}
	return set, nil
}

// needsStub: UKI-based artifacts need systemd-stub from the image itself,
// so that stub and kernel come from the same release.
func (o outputSet) needsStub() bool { return o["uki"] || o["disk"] || o["iso"] }

// artifactInputs is what the artifact writers read.
type artifactInputs struct {
	assembled     string // assemble step output (kernel, root image, stub, ...)
	initrd        string // the live initrd, root image inside
	noRootInitrd  string // the initrd without root image (disk boots, installs)
	cmdline       string
	epoch         int64
	name, version string
	arch          string
	dataMiB       int64 // disk.raw's osb-data partition, 0: none
	signer        crypto.Signer
	cert          *x509.Certificate
}

func (a *artifactInputs) kernel() string    { return filepath.Join(a.assembled, kernelImage) }
func (a *artifactInputs) rootImage() string { return filepath.Join(a.assembled, rootImage) }

// diskCmdline points the disk UKI's init at the root partition.
func (a *artifactInputs) diskCmdline() string {
	return strings.TrimSpace("osb.root=partlabel:" + diskimage.LabelRoot + " " + a.cmdline)
}

// Artifact file names in an output directory.
const (
	fileKernel  = "vmlinuz"
	fileInitrd  = "initrd.img"
	fileNoRoot  = "initrd-noroot.img"
	fileRootfs  = "root.squashfs"
	fileCmdline = "cmdline"
	fileUKI     = "uki.efi"
	fileDisk    = "disk.raw"
	fileISO     = "image.iso"
)

// writeArtifacts writes the chosen artifacts into dir and describes them.
// Order matters: the ISO carries the UKI written before it.
func writeArtifacts(ctx context.Context, out outputSet, in *artifactInputs, dir string) ([]osimage.Artifact, error) {
	var arts []osimage.Artifact
	add := func(kind osimage.ArtifactKind, name string) error {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		d, err := digestFile(p)
		if err != nil {
			return err
		}
		arts = append(arts, osimage.Artifact{Kind: kind, Path: name, Size: fi.Size(), SHA256: d})
		return nil
	}
	if out["pxe"] {
		for _, f := range []struct {
			kind osimage.ArtifactKind
			src  string
			name string
		}{
			{osimage.KindKernel, in.kernel(), fileKernel},
			{osimage.KindInitrd, in.initrd, fileInitrd},
			{osimage.KindRootfs, in.rootImage(), fileRootfs},
			{osimage.KindInitrdNoRoot, in.noRootInitrd, fileNoRoot},
		} {
			if err := copyFile(f.src, filepath.Join(dir, f.name), 0o644); err != nil {
				return nil, fmt.Errorf("pxe: %w", err)
			}
			if err := add(f.kind, f.name); err != nil {
				return nil, err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fileCmdline), []byte(in.cmdline+"\n"), 0o644); err != nil {
			return nil, err
		}
		if err := add(osimage.KindCmdline, fileCmdline); err != nil {
			return nil, err
		}
	}
	// The ISO boots the same UKI; write it aside when only the ISO wants it.
	ukiPath := filepath.Join(dir, fileUKI)
	if !out["uki"] && out["iso"] {
		ukiPath = filepath.Join(dir, ".iso-uki.efi")
		defer os.Remove(ukiPath)
	}
	if out["uki"] || out["iso"] {
		if err := in.writeUKI(ukiPath, in.initrd, in.cmdline); err != nil {
			return nil, fmt.Errorf("uki: %w", err)
		}
		if out["uki"] {
			if err := add(osimage.KindUKI, fileUKI); err != nil {
				return nil, err
			}
		}
	}
	if out["disk"] {
		if err := in.writeDisk(filepath.Join(dir, fileDisk)); err != nil {
			return nil, fmt.Errorf("disk: %w", err)
		}
		if err := add(osimage.KindDisk, fileDisk); err != nil {
			return nil, err
		}
	}
	if out["iso"] {
		err := isoimage.Write(filepath.Join(dir, fileISO), isoimage.Options{
			Architecture:    in.arch,
			UKI:             ukiPath,
			VolumeLabel:     isoVolumeLabel(in.name),
			Seed:            in.name + "/" + in.version,
			SourceDateEpoch: in.epoch,
		})
		if err != nil {
			return nil, fmt.Errorf("iso: %w", err)
		}
		if err := add(osimage.KindISO, fileISO); err != nil {
			return nil, err
		}
	}
	return arts, nil
}

// writeUKI joins systemd-stub from the image with its kernel, an initrd and
// a command line.
func (a *artifactInputs) writeUKI(path, initrdPath, cmdline string) error {
	stub, err := os.ReadFile(filepath.Join(a.assembled, stubFile))
	if err != nil {
		return fmt.Errorf("no systemd-stub in the image (package systemd-boot-efi): %w", err)
	}
	kernel, err := os.ReadFile(a.kernel())
	if err != nil {
		return err
	}
	initrd, err := os.ReadFile(initrdPath)
	if err != nil {
		return err
	}
	osr, err := os.ReadFile(filepath.Join(a.assembled, osReleaseFile))
	if err != nil {
		return err
	}
	kver, err := readKernelRelease(a.assembled)
	if err != nil {
		return err
	}
	return uki.BuildFile(path, uki.Options{
		Stub: stub, Kernel: kernel, Initrd: initrd, Cmdline: cmdline,
		OSRelease: string(osr), Uname: kver, SourceDateEpoch: a.epoch,
		Signer: a.signer, Certificate: a.cert,
	})
}

// writeDisk makes the GPT disk: its UKI boots a slim initrd that takes the
// root image from the osb-root partition instead of carrying it, and the
// empty osb-data partition after it makes the file boot as built.
func (a *artifactInputs) writeDisk(path string) error {
	ukiPath := path + ".uki.tmp"
	defer os.Remove(ukiPath)
	if err := a.writeUKI(ukiPath, a.noRootInitrd, a.diskCmdline()); err != nil {
		return err
	}
	return diskimage.Write(path, diskimage.Options{
		Architecture:    a.arch,
		UKI:             ukiPath,
		Root:            a.rootImage(),
		DataSizeMiB:     a.dataMiB,
		Seed:            a.name + "/" + a.version,
		SourceDateEpoch: a.epoch,
	})
}

// isoVolumeLabel is the recipe name as an ISO 9660 volume identifier.
func isoVolumeLabel(name string) string {
	label := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			return r
		}
		return '_'
	}, name)
	if len(label) > 32 {
		label = label[:32]
	}
	if label == "" {
		label = "OSB"
	}
	return label
}
