package artifacts

import (
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/initrd"
	"github.com/ironcore-dev/os-builder/initrd/layout"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/uki"
)

// Bounds on the step outputs a UKI is made of, read whole.
const (
	maxStubSize      = 16 << 20
	maxKernelSize    = 256 << 20
	maxOSReleaseSize = 1 << 20
)

// images writes the UKIs and the disk from the kernel and assemble steps'
// outputs.
type images struct {
	cfg       Config
	kernel    func() step.Kernel
	assembled func() step.Assembled
}

// writeUKI joins systemd-stub from the image with its kernel, an initrd and
// a command line.
func (a images) writeUKI(d *artifactDir, name, initrdPath, cmdline string) error {
	if err := checkSignedCmdline(a.cfg, cmdline, true); err != nil {
		return err
	}
	// Every file is opened inside the directory of the step that made it
	// (fsroot): a link there cannot put a file from elsewhere (the
	// signing key) into a signed UKI.
	stub, err := fsroot.ReadPath(a.assembled().Stub(), maxStubSize)
	if err != nil {
		return fmt.Errorf("no systemd-stub in the image (package systemd-boot-efi): %w", err)
	}
	kernel, err := fsroot.ReadPath(a.kernel().Image(), maxKernelSize)
	if err != nil {
		return err
	}
	// Streamed, not read whole: the live initrd carries the root image.
	initrd, err := fsroot.OpenPath(initrdPath)
	if err != nil {
		return err
	}
	defer initrd.Close()
	fi, err := initrd.Stat()
	if err != nil {
		return err
	}
	osr, err := fsroot.ReadPath(a.assembled().OSRelease(), maxOSReleaseSize)
	if err != nil {
		return err
	}
	kver, err := a.kernel().Release()
	if err != nil {
		return err
	}
	opts := uki.Options{
		Stub: stub, Kernel: kernel, InitrdReader: io.NewSectionReader(initrd, 0, fi.Size()), Cmdline: cmdline,
		OSRelease: string(osr), Uname: kver, SourceDateEpoch: a.cfg.Epoch,
		Signer: a.cfg.Signer, Certificate: a.cfg.Cert,
		// A stub of another machine type fails here, before a byte is
		// written.
		Machine: uki.MachineFor(a.cfg.Arch),
	}
	// The output directory is swapped in whole or not at all, so the UKI
	// is written in place, hashed on the way.
	err = d.write(name, func(w io.Writer) error { _, err := uki.Write(w, opts); return err })
	if err != nil {
		os.Remove(filepath.Join(d.dir, name))
	}
	return err
}

// writeDisk makes the GPT disk: its UKI boots a slim initrd that takes the
// root image from the osb-root partition instead of carrying it, and the
// empty osb-data partition after it makes the file boot as built.
func (a images) writeDisk(d *artifactDir, name, rootStack, noRoot string) error {
	path := filepath.Join(d.dir, name)
	ukiPath := path + ".uki.tmp"
	defer os.Remove(ukiPath)
	if err := a.writeUKI(d, filepath.Base(ukiPath), noRoot, diskCmdline(a.cfg.Cmdline)); err != nil {
		return err
	}
	return d.writeFile(name, func(f *os.File) (string, error) {
		return diskimage.WriteInto(f, diskimage.Options{
			Architecture:    a.cfg.Arch,
			UKI:             ukiPath,
			Root:            rootStack,
			DataSizeMiB:     a.cfg.DataMiB,
			Seed:            a.cfg.Name + "/" + a.cfg.Version,
			SourceDateEpoch: a.cfg.Epoch,
		})
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

// writeLiveInitrd writes the live initrd: the root's layers as
// uncompressed cpio segments (the kernel reads them first, then the
// compressed one), then the initrd without root.
func writeLiveInitrd(w io.Writer, stack step.Stack, noRoot string, epoch int64) error {
	for _, l := range stack.Layers {
		if err := encodeLayerSegment(w, l, epoch); err != nil {
			return err
		}
	}
	f, err := fsroot.OpenPath(noRoot)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// liveInitrdSize estimates writeLiveInitrd's bytes, for progress.
func liveInitrdSize(stack step.Stack, noRoot string) int64 {
	n := fileSize(noRoot)
	for _, l := range stack.Layers {
		n += fileSize(l.Image()) + 1024 // the segment's cpio headers
	}
	return n
}

// encodeLayerSegment writes an uncompressed cpio archive holding the layer's
// image as the initrd root layer l.Name. Uncompressed: the image is
// compressed already, and the kernel reads uncompressed segments before the
// compressed one without decompressing. It is framed here, while the live
// initrd is written, rather than cached: a cached segment would be a second
// copy of the image, written and sealed in every cold build.
func encodeLayerSegment(w io.Writer, l step.Layer, epoch int64) error {
	a := initrd.NewArchive()
	if err := a.AddDir(layout.RootLayersDir, 0o755); err != nil {
		return err
	}
	if err := a.AddHostFile(path.Join(layout.RootLayersDir, l.Name), 0o644, l.Image()); err != nil {
		return err
	}
	if err := a.Encode(w, initrd.WriteOptions{SourceDateEpoch: epoch, Compression: initrd.CompressionNone}); err != nil {
		return fmt.Errorf("initrd segment %s: %w", l.Name, err)
	}
	return nil
}
