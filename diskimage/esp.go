package diskimage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/fat12"
	"github.com/diskfs/go-diskfs/filesystem/fat32"
)

const (
	// MiB is one mebibyte, the alignment unit of every size here.
	MiB = int64(1) << 20

	// MinESPSize is the smallest ESP we make. FAT32 needs at least 65525
	// clusters (about 33 MiB with 512-byte clusters) or firmware counts it
	// as FAT16; 64 MiB keeps clear of that and of odd firmware.
	MinESPSize = 64 * MiB
	// espHeadroom is free space left in a computed ESP beyond its files.
	espHeadroom = 16 * MiB

	// FAT32 layout constants as go-diskfs v1.9.1 formats them; fatGeometry
	// mirrors its arithmetic so sizes can be checked before writing.
	fatSectorSize      = 512
	fatReservedSectors = 32
	fatMinClusters     = 65525
	fatEntrySize       = 32
)

// ErrESPTooSmall is returned when the files do not fit the requested ESP.
var ErrESPTooSmall = errors.New("ESP too small for its files")

// FATImage describes a FAT32 file system to write: an ESP on a disk, or the
// El Torito boot image of an ISO.
type FATImage struct {
	// Files maps a path inside the file system ("EFI/BOOT/BOOTX64.EFI") to
	// the host file whose bytes it gets.
	Files map[string]string
	// Label is the FAT volume label (at most 11 characters).
	Label string
	// VolumeID is the volume serial number (see SeededVolumeID).
	VolumeID uint32
	// ModTime is stamped on every directory entry. FAT cannot store dates
	// before 1980; earlier times are clamped to 1980-01-01.
	ModTime time.Time
}

// fatFile is one planned file: its cleaned FAT path and host size.
type fatFile struct {
	fatPath string // absolute, e.g. /EFI/BOOT/BOOTX64.EFI
	source  string
	size    int64
}

// plan validates the paths and stats the sources, sorted by FAT path so
// the same inputs are always laid out the same way.
func (img FATImage) plan() ([]fatFile, error) {
	if len(img.Files) == 0 {
		return nil, errors.New("FAT image has no files")
	}
	files := make([]fatFile, 0, len(img.Files))
	seen := map[string]string{}
	for p, src := range img.Files {
		clean := path.Clean("/" + p)
		if clean == "/" || strings.Contains(p, "\\") || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") {
			return nil, fmt.Errorf("invalid FAT path %q", p)
		}
		// FAT is case-insensitive: two paths differing in case collide.
		if other, dup := seen[strings.ToUpper(clean)]; dup {
			return nil, fmt.Errorf("FAT paths %q and %q collide (FAT is case-insensitive)", other, p)
		}
		seen[strings.ToUpper(clean)] = p
		fi, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("FAT file %s: %w", clean, err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("FAT file %s: source %s is not a regular file", clean, src)
		}
		files = append(files, fatFile{fatPath: clean, source: src, size: fi.Size()})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].fatPath < files[j].fatPath })
	return files, nil
}

// fatGeometry is what go-diskfs' fat32.Create makes of a given size.
type fatGeometry struct {
	clusterSize int64
	// usable is the number of clusters that can hold data: the smaller of
	// the data area and what the FAT can address.
	usable int64
	// dataClusters is the cluster count firmware derives from the boot
	// sector, which decides FAT12/16/32.
	dataClusters int64
	// dataStart is where cluster 2 starts, in bytes from the FAT's start.
	dataStart int64
}

func geometryFor(size int64) (fatGeometry, error) {
	if size%fatSectorSize != 0 {
		return fatGeometry{}, fmt.Errorf("FAT size %d is not a multiple of %d", size, fatSectorSize)
	}
	var spc int64
	switch {
	case size <= 260*MiB:
		spc = 1
	case size <= 8<<30:
		spc = 8
	case size <= 16<<30:
		spc = 32
	case size <= 32<<30:
		spc = 64
	default:
		return fatGeometry{}, fmt.Errorf("FAT size %d MiB is larger than this writer supports (32 GiB)", size/MiB)
	}
	total := size / fatSectorSize
	sectorsPerFat := (total - fatReservedSectors) / spc / 128
	if sectorsPerFat > 0xffff {
		return fatGeometry{}, fmt.Errorf("FAT size %d MiB needs a larger FAT than go-diskfs can write", size/MiB)
	}
	data := (total - fatReservedSectors - 2*sectorsPerFat) / spc
	// go-diskfs allocates cluster numbers 2 .. sectorsPerFat*128-1.
	addressable := sectorsPerFat*128 - 2
	return fatGeometry{
		clusterSize:  spc * fatSectorSize,
		usable:       min(data, addressable),
		dataClusters: data,
		dataStart:    (fatReservedSectors + 2*sectorsPerFat) * fatSectorSize,
	}, nil
}

// clustersNeeded counts the clusters the files and their directories take
// with the given cluster size, the root directory included.
func clustersNeeded(files []fatFile, clusterSize int64) int64 {
	// Directory slots: "." and ".." (root: volume label), then per child
	// one short entry plus long-name entries (13 characters each).
	slots := map[string]int64{"/": 1}
	children := map[string]map[string]bool{}
	addChild := func(dir, name string) {
		if children[dir] == nil {
			children[dir] = map[string]bool{}
		}
		if children[dir][name] {
			return
		}
		children[dir][name] = true
		slots[dir] += 1 + int64(len(name)+12)/13
	}
	var n int64
	for _, f := range files {
		n += max(1, (f.size+clusterSize-1)/clusterSize) // go-diskfs gives empty files a cluster too
		p := f.fatPath
		for p != "/" {
			dir := path.Dir(p)
			addChild(dir, path.Base(p))
			if _, ok := slots[p]; !ok && p != f.fatPath {
				slots[p] = 2
			}
			p = dir
		}
	}
	for _, s := range slots {
		n += max(1, (s*fatEntrySize+clusterSize-1)/clusterSize)
	}
	return n
}

// fits reports whether files fit a FAT of the given size, and why not.
func fits(files []fatFile, size int64) error {
	g, err := geometryFor(size)
	if err != nil {
		return err
	}
	if g.dataClusters < fatMinClusters {
		return fmt.Errorf("%w: %d MiB gives %d clusters, FAT32 needs at least %d", ErrESPTooSmall, size/MiB, g.dataClusters, fatMinClusters)
	}
	if need := clustersNeeded(files, g.clusterSize); need > g.usable {
		return fmt.Errorf("%w: files need %d clusters of %d bytes, %d MiB holds %d", ErrESPTooSmall, need, g.clusterSize, size/MiB, g.usable)
	}
	return nil
}

// Size returns the size, in whole MiB and at least MinESPSize, of a FAT32
// file system holding the files plus some headroom.
func (img FATImage) Size() (int64, error) {
	files, err := img.plan()
	if err != nil {
		return 0, err
	}
	return sizeFor(files)
}

func sizeFor(files []fatFile) (int64, error) {
	var content int64
	for _, f := range files {
		content += f.size
	}
	size := max(MinESPSize, (content+espHeadroom+MiB-1)/MiB*MiB)
	// Grow until it fits: cluster size and FAT size both depend on size.
	for ; size <= 32<<30; size += MiB {
		if err := fits(files, size); err == nil {
			return size, nil
		} else if !errors.Is(err, ErrESPTooSmall) {
			return 0, err
		}
	}
	return 0, fmt.Errorf("%w: %d bytes of files need more than 32 GiB", ErrESPTooSmall, content)
}

// WriteAt writes the FAT32 file system into f at byte offset off, taking
// size bytes. f must already extend past off+size (Truncate it): space the
// file system does not use is never written and stays a hole.
func (img FATImage) WriteAt(f *os.File, off, size int64) error {
	files, err := img.plan()
	if err != nil {
		return err
	}
	if err := fits(files, size); err != nil {
		return err
	}
	_, err = img.write(f, off, size, files, "", nil)
	return err
}

// Range is a run of bytes in a FAT image, Offset from the image's start.
type Range struct {
	Offset, Length int64
}

// SizeAligned is Size grown until the FAT's data area starts a multiple
// of align bytes (a power of two) into the image: with clusters of at
// least align bytes, every cluster then starts aligned, and with smaller
// ones WriteAtDeferring can move a file to a cluster that does.
func (img FATImage) SizeAligned(align int64) (int64, error) {
	files, err := img.plan()
	if err != nil {
		return 0, err
	}
	size, err := sizeFor(files)
	if err != nil {
		return 0, err
	}
	// One more FAT sector per step shifts the data area by two sectors
	// (two FATs): a couple of steps reach any alignment up to 2 KiB.
	for range 8 {
		g, err := geometryFor(size)
		if err != nil {
			return 0, err
		}
		if g.dataStart%align == 0 {
			return size, nil
		}
		size += g.clusterSize * 128
	}
	return 0, fmt.Errorf("no FAT size near %d MiB starts its data area %d-byte aligned", size/MiB, align)
}

// WriteAtDeferring is WriteAt without the data of the file at the FAT path
// deferred (e.g. "EFI/BOOT/BOOTX64.EFI"): it returns where that file's
// bytes go, one run starting a multiple of align bytes into the image, and
// the caller writes them (the ISO writer writes them while hashing the
// image in order, and points the ISO's own directory record for the file
// at the same bytes). Until then they read as zeros. size must come from
// SizeAligned(align).
func (img FATImage) WriteAtDeferring(f *os.File, off, size int64, deferred string, align int64) (Range, error) {
	files, err := img.plan()
	if err != nil {
		return Range{}, err
	}
	if err := fits(files, size); err != nil {
		return Range{}, err
	}
	g, err := geometryFor(size)
	if err != nil {
		return Range{}, err
	}
	if align <= 0 || align&(align-1) != 0 || g.dataStart%align != 0 {
		return Range{}, fmt.Errorf("FAT of %d bytes cannot align a file to %d bytes (size it with SizeAligned)", size, align)
	}
	want := path.Clean("/" + deferred)
	found := false
	for _, ff := range files {
		found = found || strings.EqualFold(ff.fatPath, want)
	}
	if !found {
		return Range{}, fmt.Errorf("FAT file %s to defer is not in the image", deferred)
	}
	ranges, err := img.write(f, off, size, files, want, func(first int64) int64 {
		// Clusters to move the file by so that it starts aligned.
		per := max(1, align/g.clusterSize)
		return (per - (first-2)%per) % per
	})
	if err != nil {
		return Range{}, err
	}
	if len(ranges) != 1 || ranges[0].Offset%align != 0 {
		return Range{}, fmt.Errorf("FAT file %s laid out as %v, not one run aligned to %d bytes", deferred, ranges, align)
	}
	return ranges[0], nil
}

// write formats the FAT and writes its files; the data of the file at the
// FAT path deferred (if any) is left to the caller, at the ranges
// returned, after moving it by shift(its first cluster) clusters.
func (img FATImage) write(f *os.File, off, size int64, files []fatFile, deferred string, shift func(first int64) int64) ([]Range, error) {
	var deferredRanges []Range
	label := img.Label
	if len(label) > 11 {
		return nil, fmt.Errorf("FAT label %q is longer than 11 characters", label)
	}
	fs, err := fat32.Create(file.New(f, false), size, off, fatSectorSize, label, true)
	if err != nil {
		return nil, fmt.Errorf("formatting FAT32: %w", err)
	}
	if i := slices.IndexFunc(files, func(ff fatFile) bool { return strings.EqualFold(ff.fatPath, deferred) }); i >= 0 {
		// The deferred file goes last: the clusters after its chain are
		// free, so shift can move it there.
		files = append(append(slices.Clone(files[:i]), files[i+1:]...), files[i])
	}
	made := map[string]bool{"/": true}
	for _, ff := range files {
		// Parents first, shallow to deep, so creation order is fixed.
		var parents []string
		for d := path.Dir(ff.fatPath); !made[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if err := fs.Mkdir(d); err != nil {
				return nil, fmt.Errorf("FAT mkdir %s: %w", d, err)
			}
			made[d] = true
		}
		ranges, err := writeFATFile(f, fs, off, ff, strings.EqualFold(ff.fatPath, deferred))
		if err != nil {
			return nil, err
		}
		if strings.EqualFold(ff.fatPath, deferred) {
			deferredRanges = ranges
		}
	}
	var move *chainMove
	if shift != nil && len(deferredRanges) > 0 {
		g, err := geometryFor(size)
		if err != nil {
			return nil, err
		}
		first := (deferredRanges[0].Offset-g.dataStart)/g.clusterSize + 2
		if by := shift(first); by > 0 {
			move = &chainMove{first: uint32(first), by: uint32(by)}
			for i := range deferredRanges {
				deferredRanges[i].Offset += by * g.clusterSize
			}
		}
	}
	if err := normalizeFAT(f, off, img.ModTime, img.VolumeID, move); err != nil {
		return nil, fmt.Errorf("normalizing FAT metadata: %w", err)
	}
	return deferredRanges, nil
}

// writeFATFile creates ff in fs and copies its bytes. go-diskfs writes a
// file one cluster per call and rewrites the FAT on every Write, which is
// slow for hundreds of MiB; so one Write at the last byte makes it allocate
// the whole chain, and the data then goes straight to the chain's ranges.
//
// With deferData it only allocates the chain and returns where the file's
// bytes go (offsets from the image's start, the last range cut to the
// file's size), for the caller to write.
func writeFATFile(f *os.File, fs *fat32.FileSystem, off int64, ff fatFile, deferData bool) ([]Range, error) {
	h, err := fs.OpenFile(ff.fatPath, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return nil, fmt.Errorf("FAT create %s: %w", ff.fatPath, err)
	}
	defer h.Close()
	if ff.size == 0 {
		return nil, nil
	}
	fh, ok := h.(*fat12.File)
	if !ok {
		return nil, fmt.Errorf("FAT create %s: unexpected file type %T", ff.fatPath, h)
	}
	if _, err := fh.Seek(ff.size-1, io.SeekStart); err != nil {
		return nil, fmt.Errorf("FAT seek %s: %w", ff.fatPath, err)
	}
	if _, err := fh.Write([]byte{0}); err != nil {
		return nil, fmt.Errorf("FAT allocate %s (%d bytes): %w", ff.fatPath, ff.size, err)
	}
	chain, err := fh.GetDiskRanges()
	if err != nil {
		return nil, fmt.Errorf("FAT ranges of %s: %w", ff.fatPath, err)
	}
	var ranges []Range
	left := ff.size
	for _, r := range chain {
		n := min(int64(r.Length), left)
		if n > 0 {
			ranges = append(ranges, Range{Offset: int64(r.Offset), Length: n})
		}
		left -= n
	}
	if left != 0 {
		return nil, fmt.Errorf("FAT file %s: cluster chain %d bytes short", ff.fatPath, left)
	}
	if deferData {
		return ranges, nil
	}
	src, err := openInput(ff.source)
	if err != nil {
		return nil, fmt.Errorf("FAT file %s: %w", ff.fatPath, err)
	}
	defer src.Close()
	for _, r := range ranges {
		if err := copySparse(f, off+r.Offset, io.LimitReader(src, r.Length), r.Length); err != nil {
			return nil, fmt.Errorf("FAT file %s from %s: %w", ff.fatPath, ff.source, err)
		}
	}
	var probe [1]byte
	if n, _ := src.Read(probe[:]); n > 0 {
		return nil, fmt.Errorf("FAT file %s: %s grew while writing", ff.fatPath, ff.source)
	}
	return ranges, nil
}
