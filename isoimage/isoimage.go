// Package isoimage writes the bootable ISO of an os-builder image, for
// Redfish Virtual Media: ISO 9660 with one El Torito entry for UEFI
// (platform 0xEF, no emulation) whose boot image is a FAT32 file system
// holding the UKI as the removable-media boot file. The UKI is also a plain
// file in the ISO tree, and Options.Files adds more.
//
// The El Torito sector count is 16 bits of 512-byte sectors, so it cannot
// describe a boot image over 32 MiB, and the UKI alone is larger. For such
// images the count is written as 0: EDK II (OVMF and most vendor firmware)
// then takes the boot partition to run from the image's start to the end of
// the volume, and the FAT inside knows its own size. go-diskfs would write
// the size truncated to 16 bits, which cuts the FAT short.
//
// Output is reproducible: directory and volume dates come from
// Options.SourceDateEpoch, the tree is laid out sorted, the FAT from Seed.
package isoimage

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/ironcore-dev/os-builder/internal/atomicfile"

	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/ironcore-dev/os-builder/diskimage"
)

const (
	// BootImagePath is the El Torito boot image (the FAT) in the ISO tree.
	BootImagePath = "/BOOT/EFIBOOT.IMG"
	// BootCatalogPath is the El Torito boot catalog in the ISO tree.
	BootCatalogPath = "/BOOT/BOOT.CAT"

	defaultVolumeLabel = "OSB"
	blockSize          = 2048
	fatLabel           = "OSB-ISOESP"
	maxISODepth        = 8
)

// Options says what goes on the ISO.
type Options struct {
	// Architecture is amd64 (default) or arm64; it names the boot file.
	Architecture string
	// UKI is the host path of the unified kernel image.
	UKI string
	// Files adds plain files to the ISO tree: ISO path -> host path. ISO
	// paths use ISO 9660 level 1 names (8.3, letters, digits, "_"; matched
	// case-insensitively and stored upper case), e.g. "ROOT.IMG".
	Files map[string]string
	// ESPFiles adds files to the El Torito FAT image: path -> host path.
	ESPFiles map[string]string
	// VolumeLabel is the ISO volume identifier; default "OSB".
	VolumeLabel string
	// Seed derives the FAT serial number of the boot image.
	Seed string
	// SourceDateEpoch (Unix seconds) dates every volume and directory
	// record and every FAT entry.
	SourceDateEpoch int64
}

var (
	isoName    = regexp.MustCompile(`^[A-Z0-9_]{1,8}(\.[A-Z0-9_]{1,3})?$`)
	isoDirName = regexp.MustCompile(`^[A-Z0-9_]{1,8}$`)
	volumeName = regexp.MustCompile(`^[A-Z0-9_]{1,32}$`)
)

// isoPath checks p as an ISO 9660 level 1 file path and returns it
// absolute and upper case. go-diskfs would silently mangle other names.
func isoPath(p string) (string, error) {
	clean := path.Clean("/" + strings.ToUpper(p))
	parts := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	if clean == "/" || strings.Contains(p, "..") || len(parts) > maxISODepth {
		return "", fmt.Errorf("invalid ISO path %q", p)
	}
	for i, part := range parts {
		re := isoDirName
		if i == len(parts)-1 {
			re = isoName
		}
		if !re.MatchString(part) {
			return "", fmt.Errorf("ISO path %q: %q is not an ISO 9660 level 1 name (8.3 of A-Z, 0-9, _)", p, part)
		}
	}
	return clean, nil
}

// Write writes the ISO to path, via path+".tmp" renamed into place only on
// success: after a failure nothing new is at path.
func Write(path string, opts Options) error {
	_, err := WriteDigest(path, opts)
	return err
}

// WriteDigest is Write that also returns the image's sha256 (hex), taken as
// the UKI's bytes are written (into the boot image and as a plain file)
// and from the small rest read back: the caller need not read the image
// again.
func WriteDigest(path string, opts Options) (string, error) {
	sum, err := write(path, opts)
	if err != nil {
		return "", fmt.Errorf("ISO image %s: %w", path, err)
	}
	return sum, nil
}

func write(out string, opts Options) (sum string, err error) {
	boot, err := diskimage.BootFileName(opts.Architecture)
	if err != nil {
		return "", err
	}
	if opts.UKI == "" {
		return "", errors.New("no UKI given")
	}
	if fi, err := os.Stat(opts.UKI); err != nil {
		return "", fmt.Errorf("UKI: %w", err)
	} else if !fi.Mode().IsRegular() || fi.Size() == 0 {
		return "", fmt.Errorf("UKI %s is empty or not a regular file", opts.UKI)
	}
	label := opts.VolumeLabel
	if label == "" {
		label = defaultVolumeLabel
	}
	if !volumeName.MatchString(label) {
		return "", fmt.Errorf("volume label %q: want 1-32 of A-Z, 0-9, _", label)
	}
	bootFile := "/EFI/BOOT/" + boot
	tree := map[string]string{bootFile: opts.UKI}
	reserved := map[string]bool{bootFile: true, BootImagePath: true, BootCatalogPath: true}
	for p, src := range opts.Files {
		clean, err := isoPath(p)
		if err != nil {
			return "", err
		}
		if reserved[clean] {
			return "", fmt.Errorf("ISO path %s is reserved for the boot files", clean)
		}
		if _, dup := tree[clean]; dup {
			return "", fmt.Errorf("ISO path %s given twice", clean)
		}
		if fi, err := os.Stat(src); err != nil {
			return "", fmt.Errorf("ISO file %s: %w", clean, err)
		} else if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("ISO file %s: %s is not a regular file", clean, src)
		}
		tree[clean] = src
	}

	espFiles := map[string]string{"EFI/BOOT/" + boot: opts.UKI}
	for p, src := range opts.ESPFiles {
		if strings.EqualFold(path.Clean("/"+p), bootFile) {
			return "", fmt.Errorf("ESP file %s would replace the UKI", p)
		}
		espFiles[p] = src
	}
	mtime := time.Unix(opts.SourceDateEpoch, 0).UTC()
	esp := diskimage.FATImage{
		Files:    espFiles,
		Label:    fatLabel,
		VolumeID: diskimage.SeededVolumeID(opts.Seed),
		ModTime:  mtime,
	}
	espSize, err := esp.Size()
	if err != nil {
		return "", fmt.Errorf("boot image: %w", err)
	}

	// go-diskfs builds the tree in a workspace directory and lays it out
	// on Finalize. Next to the output, inputs can be hard links, not copies.
	work, err := os.MkdirTemp(filepath.Dir(out), ".isoimage-work-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	// The boot image is staged as a hole of its size, which go-diskfs
	// lays out for free (coalescingBackend); the FAT is then written
	// straight into the ISO: its bytes are written once, not staged and
	// copied.
	if err := stageHole(filepath.Join(work, BootImagePath), espSize); err != nil {
		return "", fmt.Errorf("boot image: %w", err)
	}
	// The UKI is read from one open file: both of its copies (in the FAT
	// and as a plain file, staged as a hole too) are written from it as
	// the image is hashed.
	uki, err := os.Open(opts.UKI)
	if err != nil {
		return "", fmt.Errorf("UKI: %w", err)
	}
	defer uki.Close()
	fi, err := uki.Stat()
	if err != nil {
		return "", fmt.Errorf("UKI: %w", err)
	}
	if err := stageHole(filepath.Join(work, bootFile), fi.Size()); err != nil {
		return "", fmt.Errorf("staging %s: %w", bootFile, err)
	}
	paths := make([]string, 0, len(tree))
	for p := range tree {
		if p != bootFile {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := linkOrCopy(tree[p], filepath.Join(work, p)); err != nil {
			return "", fmt.Errorf("staging %s: %w", p, err)
		}
	}
	l := &isoLayout{
		work: work, label: label, mtime: mtime,
		esp: esp, espSize: espSize, espUKI: "EFI/BOOT/" + boot,
		bootFile: bootFile, uki: uki, ukiSize: fi.Size(),
	}
	err = atomicfile.Write(out, 0o644, func(f *os.File) error {
		sum, err = l.write(f)
		return err
	})
	return sum, err
}

// isoLayout is one ISO being written.
type isoLayout struct {
	work, label string // staged tree, volume label
	mtime       time.Time
	esp         diskimage.FATImage
	espSize     int64
	espUKI      string // the UKI's path in the FAT
	bootFile    string // the UKI's path in the ISO tree
	uki         *os.File
	ukiSize     int64
}

// write lays the ISO out into f and returns its sha256.
func (l *isoLayout) write(f *os.File) (string, error) {
	if err := layOut(f, l.work, l.label, l.espSize); err != nil {
		return "", err
	}
	if err := normalize(f, l.mtime, l.espSize); err != nil {
		return "", fmt.Errorf("normalizing ISO 9660: %w", err)
	}
	// The FAT where the boot catalog put the boot image, its UKI bytes
	// deferred to the hashing pass.
	lba, err := bootImageLBA(f)
	if err != nil {
		return "", fmt.Errorf("boot image: %w", err)
	}
	bootOff := lba * blockSize
	ranges, err := l.esp.WriteAtDeferring(f, bootOff, l.espSize, l.espUKI)
	if err != nil {
		return "", fmt.Errorf("boot image: %w", err)
	}
	var segs []ukiSegment
	var at int64
	for _, r := range ranges {
		segs = append(segs, ukiSegment{off: bootOff + r.Offset, n: r.Length, ukiOff: at})
		at += r.Length
	}
	plainLBA, plainSize, err := fileExtent(f, l.bootFile)
	if err != nil {
		return "", err
	}
	if at != l.ukiSize || plainSize != l.ukiSize {
		return "", fmt.Errorf("UKI of %d bytes laid out as %d (boot image) and %d (%s)", l.ukiSize, at, plainSize, l.bootFile)
	}
	segs = append(segs, ukiSegment{off: plainLBA * blockSize, n: plainSize})
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	return fillAndHash(f, fi.Size(), segs, l.uki)
}

// ukiSegment is a run of the image that holds UKI bytes: n bytes at off,
// from the UKI's byte ukiOff on.
type ukiSegment struct {
	off, n, ukiOff int64
}

// fillAndHash writes the UKI's bytes at segs and returns the sha256 of the
// image's size bytes, hashing the segments as they are written and reading
// back only what lies between them (metadata, FAT tables, free space).
func fillAndHash(f *os.File, size int64, segs []ukiSegment, uki io.ReaderAt) (string, error) {
	slices.SortFunc(segs, func(a, b ukiSegment) int { return cmp.Compare(a.off, b.off) })
	h := sha256.New()
	buf := make([]byte, 1<<20)
	var pos int64
	readBack := func(end int64) error {
		for pos < end {
			n := min(int64(len(buf)), end-pos)
			if _, err := f.ReadAt(buf[:n], pos); err != nil {
				return fmt.Errorf("reading the image at %d: %w", pos, err)
			}
			h.Write(buf[:n])
			pos += n
		}
		return nil
	}
	for _, s := range segs {
		if s.off < pos || s.off+s.n > size {
			return "", fmt.Errorf("UKI bytes at %d (+%d) overlap others or lie past the image's %d bytes", s.off, s.n, size)
		}
		if err := readBack(s.off); err != nil {
			return "", err
		}
		for done := int64(0); done < s.n; {
			n := min(int64(len(buf)), s.n-done)
			if _, err := uki.ReadAt(buf[:n], s.ukiOff+done); err != nil {
				return "", fmt.Errorf("reading the UKI at %d (did it change while writing?): %w", s.ukiOff+done, err)
			}
			if _, err := f.WriteAt(buf[:n], s.off+done); err != nil {
				return "", err
			}
			h.Write(buf[:n])
			done += n
		}
		pos = s.off + s.n
	}
	if err := readBack(size); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// layOut lays the staged tree in work out as ISO 9660 in f, with the El
// Torito entry for the boot image. Staged holes cost nothing here
// (coalescingBackend).
func layOut(f *os.File, work, label string, espSize int64) error {
	out9660, err := newCoalescingBackend(file.New(f, false))
	if err != nil {
		return err
	}
	fs, err := iso9660.Create(out9660, 0, 0, blockSize, work)
	if err != nil {
		return fmt.Errorf("creating ISO 9660: %w", err)
	}
	err = fs.Finalize(iso9660.FinalizeOptions{
		VolumeIdentifier: label,
		ElTorito: &iso9660.ElTorito{
			BootCatalog: BootCatalogPath,
			Platform:    iso9660.EFI,
			Entries: []*iso9660.ElToritoEntry{{
				Platform:  iso9660.EFI,
				Emulation: iso9660.NoEmulation,
				BootFile:  BootImagePath,
			}},
		},
	})
	if err == nil {
		err = out9660.Flush()
	}
	if err != nil {
		return fmt.Errorf("laying out ISO 9660: %w", err)
	}
	return nil
}

// stageHole creates p as a file of size bytes that are all a hole.
func stageHole(p string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// linkOrCopy puts src's bytes at dst: a hard link when src is on the same
// file system (no copy, and go-diskfs only reads it), else a copy.
func linkOrCopy(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if err := os.Link(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	return o.Close()
}
