// Package isoimage writes the bootable ISO of an os-builder image, for
// Redfish Virtual Media: ISO 9660 with one El Torito entry for UEFI
// (platform 0xEF, no emulation) whose boot image is a FAT32 file system
// holding the UKI as the removable-media boot file. The UKI is also a plain
// file in the ISO tree, whose record points at the same bytes in the FAT
// (the UKI is stored once), and Options.Files adds more.
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

// Write writes the ISO to path, via a temp file beside it, synced and
// renamed into place only on success: after a failure nothing new is at
// path.
func Write(path string, opts Options) error {
	_, err := WriteDigest(path, opts)
	return err
}

// WriteDigest is Write that also returns the image's sha256 (hex), taken as
// the UKI's bytes are written (into the boot image and as a plain file)
// and from the small rest read back: the caller need not read the image
// again.
func WriteDigest(path string, opts Options) (sum string, err error) {
	err = atomicfile.Write(path, 0o644, func(f *os.File) error {
		sum, err = WriteInto(f, opts)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("ISO image %s: %w", path, err)
	}
	return sum, nil
}

// WriteInto writes the ISO into f, a new empty file, and returns its
// sha256 (hex) as WriteDigest does, without a temp file, rename or sync:
// for a caller that makes a whole directory of files and publishes it in
// one step (the builder's staging directory).
func WriteInto(f *os.File, opts Options) (string, error) {
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
	espSize, err := esp.SizeAligned(blockSize)
	if err != nil {
		return "", fmt.Errorf("boot image: %w", err)
	}

	// go-diskfs lays the tree out from a workspace directory. It copies
	// file data 2 KiB per read and write, so every file is staged empty:
	// it writes only the metadata, and the data extents (the boot image,
	// then the files in path order) are placed after it here, each written
	// once while the image is hashed.
	work, err := os.MkdirTemp(filepath.Dir(f.Name()), ".isoimage-work-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	paths := make([]string, 0, len(tree)+1)
	for p := range tree {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range append([]string{BootImagePath}, paths...) {
		if err := stageEmpty(filepath.Join(work, p)); err != nil {
			return "", fmt.Errorf("staging %s: %w", p, err)
		}
	}
	l := &isoLayout{
		work: work, label: label, mtime: mtime,
		esp: esp, espSize: espSize, espUKI: "EFI/BOOT/" + boot,
	}
	// Each file's bytes come from one open file, checked against the size
	// it had when opened (the UKI's go into the FAT's run, which its plain
	// record shares).
	for _, p := range paths {
		src, err := os.Open(tree[p])
		if err != nil {
			return "", fmt.Errorf("ISO file %s: %w", p, err)
		}
		defer src.Close()
		fi, err := src.Stat()
		if err != nil {
			return "", fmt.Errorf("ISO file %s: %w", p, err)
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("ISO file %s: %s is not a regular file", p, tree[p])
		}
		l.files = append(l.files, isoFile{path: p, src: src, size: fi.Size()})
		if p == bootFile {
			l.uki = len(l.files) - 1
		}
	}
	return l.write(f)
}

// isoLayout is one ISO being written.
type isoLayout struct {
	work, label string // staged tree, volume label
	mtime       time.Time
	esp         diskimage.FATImage
	espSize     int64
	espUKI      string    // the UKI's path in the FAT
	files       []isoFile // the tree's files, in path order
	uki         int       // the UKI's index in files
}

// isoFile is a file of the ISO tree and the open file its bytes come from.
type isoFile struct {
	path string
	src  *os.File
	size int64
}

// write lays the ISO out into f and returns its sha256.
func (l *isoLayout) write(f *os.File) (string, error) {
	if err := layOut(f, l.work, l.label); err != nil {
		return "", err
	}
	metaBlocks, err := normalize(f, l.mtime)
	if err != nil {
		return "", fmt.Errorf("normalizing ISO 9660: %w", err)
	}
	// The data extents follow the metadata: the boot image, then the files
	// but the UKI, whose record points into the boot image: the FAT keeps
	// its bytes in one block-aligned run, which is the file's extent too.
	bootLBA := metaBlocks
	next := bootLBA + blocks(l.espSize)
	if err := setExtent(f, BootImagePath, bootLBA, l.espSize); err != nil {
		return "", err
	}
	if err := setBootImage(f, bootLBA, l.espSize); err != nil {
		return "", err
	}
	var segs []segment
	for i, file := range l.files {
		if i == l.uki {
			continue
		}
		if err := setExtent(f, file.path, next, file.size); err != nil {
			return "", err
		}
		segs = append(segs, segment{off: next * blockSize, n: file.size, src: file.src})
		next += blocks(file.size)
	}
	if err := setVolumeBlocks(f, next); err != nil {
		return "", err
	}
	if err := f.Truncate(next * blockSize); err != nil {
		return "", err
	}
	// The FAT in its extent, the UKI's bytes deferred to the hashing pass.
	bootOff := bootLBA * blockSize
	run, err := l.esp.WriteAtDeferring(f, bootOff, l.espSize, l.espUKI, blockSize)
	if err != nil {
		return "", fmt.Errorf("boot image: %w", err)
	}
	uki := l.files[l.uki]
	if run.Length != uki.size {
		return "", fmt.Errorf("UKI of %d bytes laid out as %d in the boot image", uki.size, run.Length)
	}
	if err := setExtent(f, uki.path, (bootOff+run.Offset)/blockSize, uki.size); err != nil {
		return "", err
	}
	segs = append(segs, segment{off: bootOff + run.Offset, n: uki.size, src: uki.src})
	return fillAndHash(f, next*blockSize, segs)
}

// blocks is the number of ISO blocks n bytes take.
func blocks(n int64) int64 { return (n + blockSize - 1) / blockSize }

// segment is a run of the image that holds a file's bytes: n bytes at off,
// from src's byte srcOff on.
type segment struct {
	off, n int64
	src    io.ReaderAt
	srcOff int64
}

// fillAndHash writes the segments' bytes and returns the sha256 of the
// image's size bytes, hashing the segments as they are written and reading
// back only what lies between them (metadata, FAT tables, free space).
func fillAndHash(f *os.File, size int64, segs []segment) (string, error) {
	slices.SortFunc(segs, func(a, b segment) int { return cmp.Compare(a.off, b.off) })
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
			return "", fmt.Errorf("file bytes at %d (+%d) overlap others or lie past the image's %d bytes", s.off, s.n, size)
		}
		if err := readBack(s.off); err != nil {
			return "", err
		}
		for done := int64(0); done < s.n; {
			n := min(int64(len(buf)), s.n-done)
			if _, err := s.src.ReadAt(buf[:n], s.srcOff+done); err != nil {
				return "", fmt.Errorf("reading a file at %d (did it change while writing?): %w", s.srcOff+done, err)
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
// Torito entry for the boot image. Its files are empty: it writes metadata.
func layOut(f *os.File, work, label string) error {
	fs, err := iso9660.Create(file.New(f, false), 0, 0, blockSize, work)
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
	if err != nil {
		return fmt.Errorf("laying out ISO 9660: %w", err)
	}
	return nil
}

// stageEmpty creates p as an empty file.
func stageEmpty(p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	return f.Close()
}
