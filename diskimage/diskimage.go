// Package diskimage writes the raw GPT disk image of an os-builder image:
// partition 1 "osb-esp" (FAT32 ESP holding the UKI as the removable-media
// boot path), partition 2 "osb-root" (the squashfs root image, verbatim)
// and, when Options.DataSizeMiB asks for it, partition 3 "osb-data": an
// empty ext4 file system labelled osb-data, last on the disk so that the
// init can grow it to the end of a bigger disk at first boot. The labels
// and types are the ones docs/cmdline.md fixes for the init.
//
// Images are written in user space (no loop devices or mounts), sparse,
// and reproducibly: GUIDs and the FAT serial come from Options.Seed, FAT
// times from Options.SourceDateEpoch.
package diskimage

import (
	"github.com/ironcore-dev/os-builder/internal/atomicfile"

	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/diskfs/go-diskfs/partition/gpt"
)

// Partition names (GPT labels) and DPS type GUIDs, per docs/cmdline.md.
const (
	LabelESP  = "osb-esp"
	LabelRoot = "osb-root"
	LabelData = "osb-data"

	TypeESP        = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
	TypeRootAMD64  = "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"
	TypeRootARM64  = "B921B045-1DF0-41C3-AF44-4C6F280D3FAE"
	TypeLinuxVar   = "4D21B016-B534-45C2-A9FB-5C16E091FD2D"
	espLabel       = "OSB-ESP"
	sectorSize     = 512
	partAlign      = MiB
	attrReadOnly   = uint64(1) << 60
	defaultArch    = "amd64"
	dataSizeLimMiB = 1 << 24 // 16 TiB: a sanity bound for DataSizeMiB
	// MinDataSizeMiB is the smallest data partition: room for the ext4
	// metadata and journal with space left over.
	MinDataSizeMiB = 8
)

// Options says what goes on the disk.
type Options struct {
	// Architecture is amd64 (default) or arm64: it picks the root
	// partition type and the ESP boot file name.
	Architecture string
	// UKI is the host path of the unified kernel image, installed as the
	// ESP's removable-media boot file (EFI/BOOT/BOOTX64.EFI on amd64).
	UKI string
	// Root is the host path of the squashfs root image, copied verbatim
	// into partition 2.
	Root string
	// ESPFiles adds files to the ESP: ESP path -> host path.
	ESPFiles map[string]string
	// ESPSizeMiB fixes the ESP size; 0 sizes it to its files plus headroom
	// (at least MinESPSize). Too small a size is an ErrESPTooSmall error.
	ESPSizeMiB int64
	// DataSizeMiB > 0 adds an osb-data partition of that size, formatted
	// as an empty ext4 file system labelled osb-data (by the host's mke2fs,
	// reproducibly). 0, the default, leaves it out: the init then creates
	// one when the disk has room after osb-root.
	DataSizeMiB int64
	// Seed derives the disk and partition GUIDs and the FAT serial; use
	// something that names the build, e.g. recipe name and version.
	Seed string
	// SourceDateEpoch (Unix seconds) is stamped on every FAT entry.
	SourceDateEpoch int64
}

// BootFileName is the UEFI removable-media boot file for an architecture.
func BootFileName(arch string) (string, error) {
	switch arch {
	case "", "amd64":
		return "BOOTX64.EFI", nil
	case "arm64":
		return "BOOTAA64.EFI", nil
	}
	return "", fmt.Errorf("unsupported architecture %q (want amd64 or arm64)", arch)
}

// rootType is the DPS root partition type for an architecture.
func rootType(arch string) string {
	if arch == "arm64" {
		return TypeRootARM64
	}
	return TypeRootAMD64
}

// Layout is where things go on the disk, in bytes.
type Layout struct {
	DiskSize            int64
	ESPStart, ESPSize   int64
	RootStart, RootSize int64
	DataStart, DataSize int64 // DataSize 0: no data partition
	RootImageSize       int64 // bytes of squashfs, <= RootSize
	espFiles            []fatFile
	espImage            FATImage
	rootSource          string
}

// Plan checks the options and computes the layout without writing.
func Plan(opts Options) (*Layout, error) {
	boot, err := BootFileName(opts.Architecture)
	if err != nil {
		return nil, err
	}
	if opts.UKI == "" {
		return nil, errors.New("no UKI given")
	}
	if opts.Root == "" {
		return nil, errors.New("no root image given")
	}
	if opts.ESPSizeMiB < 0 || opts.DataSizeMiB < 0 || opts.DataSizeMiB > dataSizeLimMiB ||
		(opts.DataSizeMiB > 0 && opts.DataSizeMiB < MinDataSizeMiB) {
		return nil, fmt.Errorf("invalid partition sizes: ESP %d MiB, data %d MiB (data: 0, or %d MiB to %d MiB)", opts.ESPSizeMiB, opts.DataSizeMiB, MinDataSizeMiB, dataSizeLimMiB)
	}
	uki, err := os.Stat(opts.UKI)
	if err != nil {
		return nil, fmt.Errorf("UKI: %w", err)
	}
	if !uki.Mode().IsRegular() || uki.Size() == 0 {
		return nil, fmt.Errorf("UKI %s is empty or not a regular file", opts.UKI)
	}
	root, err := os.Stat(opts.Root)
	if err != nil {
		return nil, fmt.Errorf("root image: %w", err)
	}
	if !root.Mode().IsRegular() || root.Size() == 0 {
		return nil, fmt.Errorf("root image %s is empty or not a regular file", opts.Root)
	}

	bootPath := "EFI/BOOT/" + boot
	files := map[string]string{bootPath: opts.UKI}
	for p, src := range opts.ESPFiles {
		if _, dup := files[p]; dup {
			return nil, fmt.Errorf("ESP file %s would replace the UKI", p)
		}
		files[p] = src
	}
	img := FATImage{
		Files:    files,
		Label:    espLabel,
		VolumeID: SeededVolumeID(opts.Seed),
		ModTime:  time.Unix(opts.SourceDateEpoch, 0).UTC(),
	}
	planned, err := img.plan()
	if err != nil {
		return nil, err
	}
	espSize := opts.ESPSizeMiB * MiB
	if espSize == 0 {
		if espSize, err = sizeFor(planned); err != nil {
			return nil, err
		}
	} else if err := fits(planned, espSize); err != nil {
		return nil, fmt.Errorf("ESP of %d MiB: %w", opts.ESPSizeMiB, err)
	}

	l := &Layout{
		ESPStart:      partAlign, // room for MBR + primary GPT, 1 MiB aligned
		ESPSize:       espSize,
		RootImageSize: root.Size(),
		RootSize:      alignUp(root.Size(), partAlign),
		espFiles:      planned,
		espImage:      img,
		rootSource:    opts.Root,
	}
	l.RootStart = l.ESPStart + l.ESPSize
	end := l.RootStart + l.RootSize
	if opts.DataSizeMiB > 0 {
		l.DataStart, l.DataSize = end, opts.DataSizeMiB*MiB
		end += l.DataSize
	}
	// The backup GPT (array + header, 33 sectors) goes in a final MiB.
	l.DiskSize = end + partAlign
	return l, nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }

// Write writes the disk image to path. It writes a temp file beside it and
// renames it into place only when everything succeeded; on failure nothing is left at
// path (an older file there stays untouched).
func Write(path string, opts Options) error {
	l, err := Plan(opts)
	if err != nil {
		return fmt.Errorf("disk image %s: %w", path, err)
	}
	if err := atomicfile.Write(path, 0o644, func(f *os.File) error { return l.write(f, opts) }); err != nil {
		return fmt.Errorf("disk image %s: %w", path, err)
	}
	return nil
}

func (l *Layout) write(f *os.File, opts Options) error {
	return l.writeTo(f, f, opts)
}

// writeTo writes the image into f through w (f itself, or a hash of it),
// at offsets that only go forward but for the backup GPT.
func (l *Layout) writeTo(f *os.File, w io.WriterAt, opts Options) error {
	if err := f.Truncate(l.DiskSize); err != nil {
		return fmt.Errorf("sizing: %w", err)
	}
	if err := l.table(opts).Write(writerFile{f, w}, l.DiskSize); err != nil {
		return fmt.Errorf("writing GPT: %w", err)
	}
	// The FAT writer goes back and forth: it writes a scratch file that is
	// then copied in, in order.
	if err := l.writeESP(f, w); err != nil {
		return fmt.Errorf("writing ESP: %w", err)
	}
	src, err := openInput(l.rootSource)
	if err != nil {
		return fmt.Errorf("root image: %w", err)
	}
	defer src.Close()
	if err := copySparse(w, l.RootStart, src, l.RootImageSize); err != nil {
		return fmt.Errorf("copying root image %s: %w", l.rootSource, err)
	}
	if l.DataSize > 0 {
		if err := l.writeData(f, w, opts); err != nil {
			return fmt.Errorf("writing %s: %w", LabelData, err)
		}
	}
	return nil
}

// writerFile is f with its writes going through w.
type writerFile struct {
	*os.File
	w io.WriterAt
}

func (f writerFile) WriteAt(p []byte, off int64) (int, error) { return f.w.WriteAt(p, off) }

func (l *Layout) writeESP(f *os.File, w io.WriterAt) error {
	scratch, err := os.Create(f.Name() + ".esp")
	if err != nil {
		return err
	}
	defer os.Remove(scratch.Name())
	defer scratch.Close()
	if err := scratch.Truncate(l.ESPSize); err != nil {
		return err
	}
	if _, err := l.espImage.write(scratch, 0, l.ESPSize, l.espFiles, "", nil); err != nil {
		return err
	}
	return copyExtents(w, l.ESPStart, scratch, l.ESPSize)
}

// writeData formats the data partition in a scratch file beside the image
// and copies it in, sparsely.
func (l *Layout) writeData(f *os.File, w io.WriterAt, opts Options) error {
	scratch := f.Name() + ".data"
	defer os.Remove(scratch)
	fs := ext4Image{Label: LabelData, Seed: opts.Seed, Epoch: opts.SourceDateEpoch, SizeByte: l.DataSize}
	if err := fs.format(scratch); err != nil {
		return err
	}
	src, err := os.Open(scratch)
	if err != nil {
		return err
	}
	defer src.Close()
	return copyExtents(w, l.DataStart, src, l.DataSize)
}

// table is the GPT for the layout, with GUIDs derived from the seed.
func (l *Layout) table(opts Options) *gpt.Table {
	part := func(index int, name, typ string, start, size int64, attrs uint64) *gpt.Partition {
		return &gpt.Partition{
			Index:      index,
			Start:      uint64(start / sectorSize),
			End:        uint64((start+size)/sectorSize - 1),
			Size:       uint64(size),
			Type:       gpt.Type(typ),
			Name:       name,
			GUID:       seededGUID(opts.Seed, "partition:"+name),
			Attributes: attrs,
		}
	}
	parts := []*gpt.Partition{
		part(1, LabelESP, TypeESP, l.ESPStart, l.ESPSize, 0),
		// Read-only: the squashfs never changes, and tools honouring the
		// DPS flag (systemd-gpt-auto-generator) then mount it so.
		part(2, LabelRoot, rootType(opts.Architecture), l.RootStart, l.RootSize, attrReadOnly),
	}
	if l.DataSize > 0 {
		parts = append(parts, part(3, LabelData, TypeLinuxVar, l.DataStart, l.DataSize, 0))
	}
	return &gpt.Table{
		LogicalSectorSize:  sectorSize,
		PhysicalSectorSize: sectorSize,
		ProtectiveMBR:      true,
		GUID:               seededGUID(opts.Seed, "disk"),
		Partitions:         parts,
	}
}
