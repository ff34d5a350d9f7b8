package builder

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/initrd/disk"
	"github.com/ironcore-dev/os-builder/initrd/gpt"
	"github.com/ironcore-dev/os-builder/initrd/layout"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/uki"
)

// Byte identities that stand in for boots: where a test's artifact holds
// exactly the bytes another test boots through the same firmware path, the
// test compares the bytes instead of booting them again. The files are read
// in user space (mtools for FAT, no mounts).

// fatFile reads name (an mtools path, "::EFI/BOOT/BOOTX64.EFI") from the
// FAT file system that starts at byte off of img. mtools reads it, not
// go-diskfs, which wrote it.
func fatFile(t *testing.T, img string, off int64, name string) []byte {
	t.Helper()
	mtype := testutil.RequireTool(t, "mtype")
	return testutil.Run(t, mtype, "-i", img+"@@"+strconv.FormatInt(off, 10), name)
}

// elToritoEFIImage is where the FAT image an UEFI firmware boots from a CD
// starts in iso: the boot record volume descriptor at sector 17 names the
// boot catalog, whose validation entry is for platform 0xEF (EFI) and whose
// default entry is bootable, no emulation, loaded from the returned byte
// offset. It is the path OVMF's El Torito code follows, not the ISO 9660
// tree's /BOOT/EFIBOOT.IMG record.
func elToritoEFIImage(t *testing.T, iso string) int64 {
	t.Helper()
	f, err := os.Open(iso)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const block = 2048
	br := make([]byte, block)
	if _, err := f.ReadAt(br, 17*block); err != nil {
		t.Fatal(err)
	}
	if br[0] != 0 || string(br[1:6]) != "CD001" || !bytes.HasPrefix(br[7:], []byte("EL TORITO SPECIFICATION")) {
		t.Fatalf("%s: no El Torito boot record at sector 17", iso)
	}
	cat := make([]byte, 64)
	if _, err := f.ReadAt(cat, int64(binary.LittleEndian.Uint32(br[0x47:]))*block); err != nil {
		t.Fatal(err)
	}
	if cat[0] != 1 || cat[1] != 0xef || cat[30] != 0x55 || cat[31] != 0xaa {
		t.Fatalf("%s: boot catalog validation entry % x, want header 1, platform 0xEF (EFI), key 55 AA", iso, cat[:32])
	}
	if def := cat[32:]; def[0] != 0x88 || def[1] != 0 {
		t.Fatalf("%s: default boot entry indicator %#x media %#x, want 0x88 (bootable), 0 (no emulation)", iso, def[0], def[1])
	}
	return int64(binary.LittleEndian.Uint32(cat[32+8:])) * block
}

// cpioSegment is one uncompressed newc archive at the start of an initrd:
// its regular files' names, data offsets and sizes, and where it ends.
type cpioSegment struct {
	files []cpioFile
	end   int64
}

type cpioFile struct {
	name      string
	off, size int64
}

// uncompressedSegments walks the newc ("070701") archives at the start of
// the initrd r, as the kernel unpacks them, up to the first byte that does
// not start one (the compressed initrd after them).
func uncompressedSegments(t *testing.T, r io.ReaderAt, size int64) []cpioSegment {
	t.Helper()
	align := func(n int64) int64 { return (n + 3) &^ 3 }
	var segs []cpioSegment
	off := int64(0)
	for {
		magic := make([]byte, 6)
		if off+6 > size {
			return segs
		}
		if _, err := r.ReadAt(magic, off); err != nil {
			t.Fatal(err)
		}
		if string(magic) != "070701" {
			return segs
		}
		var seg cpioSegment
		for {
			h := make([]byte, 110)
			if _, err := r.ReadAt(h, off); err != nil {
				t.Fatalf("initrd: cpio header at %d: %v", off, err)
			}
			if string(h[:6]) != "070701" {
				t.Fatalf("initrd: no newc header at %d inside a segment", off)
			}
			field := func(i int) int64 {
				v, err := strconv.ParseUint(string(h[6+8*i:14+8*i]), 16, 32)
				if err != nil {
					t.Fatalf("initrd: cpio header at %d: %v", off, err)
				}
				return int64(v)
			}
			mode, fileSize, nameSize := field(1), field(6), field(11)
			name := make([]byte, nameSize)
			if _, err := r.ReadAt(name, off+110); err != nil {
				t.Fatal(err)
			}
			n := strings.TrimRight(string(name), "\x00")
			data := align(off + 110 + nameSize)
			off = align(data + fileSize)
			if n == "TRAILER!!!" {
				break
			}
			if mode&0o170000 == 0o100000 {
				seg.files = append(seg.files, cpioFile{n, data, fileSize})
			}
		}
		seg.end = off
		segs = append(segs, seg)
	}
}

// fileSum is the sha256 of the file p.
func fileSum(t *testing.T, p string) [32]byte {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return rangeSum(t, p, 0, fi.Size())
}

// checkLiveInitrdMatchesDisk proves, byte for byte, that the live kernel +
// initrd of the build in out carry what its disk.raw boots: the live
// initrd is one uncompressed segment per root layer, each holding exactly
// that layer's image in root.squashfs (the root stack), then
// initrd-noroot.img verbatim; disk.raw's osb-root partition is
// root.squashfs verbatim (zero padded), and the UKI on its ESP carries
// vmlinuz as .linux and initrd-noroot.img as .initrd. A boot of the disk
// to multi-user then runs the same kernel, init and root layers the live
// path would; what the live path adds (the layers from /root.layers in
// memory) is code that TestBootLiveKernelInitrd runs to multi-user.
func checkLiveInitrdMatchesDisk(t *testing.T, out, bootFile string) {
	t.Helper()
	rootfs, live, noRoot := filepath.Join(out, artifacts.FileRootfs), filepath.Join(out, artifacts.FileInitrd), filepath.Join(out, artifacts.FileNoRoot)
	parts := stackParts(t, rootfs)

	f, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	segs := uncompressedSegments(t, f, fi.Size())
	if len(segs) != len(parts) {
		t.Fatalf("%s: %d uncompressed segments, root stack of %d layers", live, len(segs), len(parts))
	}
	prev := ""
	for i, s := range segs {
		if len(s.files) != 1 {
			t.Fatalf("%s: segment %d holds %d files, want one layer image", live, i, len(s.files))
		}
		lf := s.files[0]
		if dir := "/" + path.Dir(strings.TrimPrefix(lf.name, "/")); dir != layout.RootLayersDir {
			t.Errorf("%s: segment %d holds %s, not a file in %s", live, i, lf.name, layout.RootLayersDir)
		}
		if lf.name <= prev { // the init stacks them by name, bottom first
			t.Errorf("%s: layer %s after %s: not bottom first by name", live, lf.name, prev)
		}
		prev = lf.name
		if lf.size != parts[i].Size || rangeSum(t, live, lf.off, lf.size) != rangeSum(t, rootfs, parts[i].Offset, parts[i].Size) {
			t.Errorf("%s: layer %d (%s, %d bytes) differs from part %d of %s (%d bytes)", live, i, lf.name, lf.size, i, artifacts.FileRootfs, parts[i].Size)
		}
	}
	rest := segs[len(segs)-1].end
	if nr, err := os.Stat(noRoot); err != nil {
		t.Fatal(err)
	} else if fi.Size()-rest != nr.Size() || rangeSum(t, live, rest, nr.Size()) != fileSum(t, noRoot) {
		t.Errorf("%s after its layer segments (%d bytes) is not %s (%d bytes)", live, fi.Size()-rest, artifacts.FileNoRoot, nr.Size())
	}

	diskPath := filepath.Join(out, artifacts.FileDisk)
	df, err := os.Open(diskPath)
	if err != nil {
		t.Fatal(err)
	}
	defer df.Close()
	dfi, err := df.Stat()
	if err != nil {
		t.Fatal(err)
	}
	table, err := gpt.ReadPrimary(df, 512, dfi.Size())
	if err != nil {
		t.Fatal(err)
	}
	root, esp := table.ByName(disk.PartLabelRoot), table.ByName(disk.PartLabelESP)
	if root == nil || esp == nil {
		t.Fatalf("%s: partitions %+v, want %s and %s", diskPath, table.Partitions, disk.PartLabelESP, disk.PartLabelRoot)
	}
	start, end := root.ByteRange(512)
	rfi, err := os.Stat(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	if end-start < rfi.Size() || rangeSum(t, diskPath, start, rfi.Size()) != fileSum(t, rootfs) {
		t.Errorf("%s: %s (%d bytes) does not start with %s (%d bytes)", diskPath, disk.PartLabelRoot, end-start, artifacts.FileRootfs, rfi.Size())
	} else if rangeSum(t, diskPath, start+rfi.Size(), end-start-rfi.Size()) != sha256.Sum256(make([]byte, end-start-rfi.Size())) {
		t.Errorf("%s: %s holds more than %s", diskPath, disk.PartLabelRoot, artifacts.FileRootfs)
	}
	espStart, _ := esp.ByteRange(512)
	pe := fatFile(t, diskPath, espStart, "::EFI/BOOT/"+bootFile)
	for section, file := range map[string]string{uki.SectionLinux: artifacts.FileKernel, uki.SectionInitrd: artifacts.FileNoRoot} {
		got, err := uki.SectionData(pe, section)
		if err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != fileSum(t, filepath.Join(out, file)) {
			t.Errorf("%s: the ESP's %s carries a %s of %d bytes that is not %s", diskPath, bootFile, section, len(got), file)
		}
	}
}
