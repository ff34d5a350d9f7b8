package isoimage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"

	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

const mib = diskimage.MiB

type fixture struct {
	dir, uki, rootImg string
}

func newFixture(t testing.TB, ukiSize int64) fixture {
	t.Helper()
	dir := t.TempDir()
	return fixture{
		dir:     dir,
		uki:     writeInput(t, dir, "uki.efi", ukiSize, 1),
		rootImg: writeInput(t, dir, "root.squashfs", 3*mib+5, 2),
	}
}

func (fx fixture) options() Options {
	return Options{
		UKI:             fx.uki,
		Files:           map[string]string{"root.img": fx.rootImg},
		Seed:            "hypervisor 1.0",
		SourceDateEpoch: 1700000000,
	}
}

func (fx fixture) write(t testing.TB, opts Options) string {
	t.Helper()
	p := filepath.Join(fx.dir, "image.iso")
	if err := Write(p, opts); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return p
}

// catalogEntry reads the El Torito default entry's sector count and load
// LBA straight from the image.
func catalogEntry(t *testing.T, iso string) (platform byte, count uint16, lba uint32) {
	t.Helper()
	b := testutil.ReadFile(t, iso)
	br := b[17*blockSize:]
	if !bytes.HasPrefix(br[7:], []byte("EL TORITO SPECIFICATION")) {
		t.Fatal("no El Torito boot record at sector 17")
	}
	cat := b[int64(binary.LittleEndian.Uint32(br[0x47:]))*blockSize:]
	return cat[1], binary.LittleEndian.Uint16(cat[32+6:]), binary.LittleEndian.Uint32(cat[32+8:])
}

// extentOf reads the extent of the file at p from the ISO's directory.
func extentOf(t *testing.T, iso, p string) (lba, size int64) {
	t.Helper()
	f, err := os.Open(iso)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, rec, err := findRecord(f, p)
	if err != nil {
		t.Fatal(err)
	}
	return int64(binary.LittleEndian.Uint32(rec[recordExtent:])), int64(binary.LittleEndian.Uint32(rec[recordSize:]))
}

// TestElToritoByXorriso checks the boot catalog with xorriso and extracts
// every file back with osirrox; the FAT boot image is then read by mtools.
func TestElToritoByXorriso(t *testing.T) {
	xorriso := testutil.RequireTool(t, "xorriso")
	mtype := testutil.RequireTool(t, "mtype")
	fsck := testutil.RequireTool(t, "fsck.fat")
	// The smallest FAT32 image is 64 MiB, already past the 16-bit count:
	// every case must get a count of 0.
	tests := []struct {
		name    string
		ukiSize int64
		pad     int64 // extra ESP file size, to grow the boot image
	}{
		{"small UKI", 2 * mib, 0},
		{"UKI over 32 MiB", 40 * mib, 0},
		{"boot image over 128 MiB", 2 * mib, 130 * mib},
		// The UKI's run in the FAT starts block-aligned, whatever comes
		// before it: 512-byte clusters moved by 0-3, or 4 KiB ones.
		{"one cluster before the UKI", 2 * mib, 512},
		{"two clusters before the UKI", 2 * mib, 1024},
		{"three clusters before the UKI", 2 * mib, 1536},
		{"4 KiB clusters", 2*mib + 1, 300 * mib},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, tc.ukiSize)
			opts := fx.options()
			if tc.pad > 0 {
				opts.ESPFiles = map[string]string{"PAD.BIN": testutil.SparseZeros(t, fx.dir, "pad", tc.pad)}
			}
			iso := fx.write(t, opts)

			report := string(testutil.Run(t, xorriso, "-indev", iso, "-report_el_torito", "plain"))
			t.Logf("xorriso:\n%s", report)
			if !regexp.MustCompile(`El Torito boot img :\s+1\s+UEFI\s+y\s+none`).MatchString(report) {
				t.Errorf("no bootable UEFI no-emulation entry in:\n%s", report)
			}
			platform, count, _ := catalogEntry(t, iso)
			if platform != 0xef {
				t.Errorf("validation entry platform %#x, want 0xef", platform)
			}
			if count != 0 {
				t.Errorf("sector count %d, want 0 for a boot image over 32 MiB", count)
			}
			// The plain UKI is the FAT's copy: its extent lies in the boot
			// image's.
			bootLBA, bootSize := extentOf(t, iso, BootImagePath)
			ukiLBA, ukiSize := extentOf(t, iso, "/EFI/BOOT/BOOTX64.EFI")
			if ukiLBA < bootLBA || ukiLBA*blockSize+ukiSize > bootLBA*blockSize+bootSize {
				t.Errorf("UKI at block %d (+%d bytes) is outside the boot image at block %d (+%d bytes)", ukiLBA, ukiSize, bootLBA, bootSize)
			}

			out := filepath.Join(fx.dir, "extract")
			testutil.Run(t, xorriso, "-osirrox", "on", "-indev", iso, "-extract", "/", out)
			for isoPath, src := range map[string]string{
				"EFI/BOOT/BOOTX64.EFI": fx.uki,
				"ROOT.IMG":             fx.rootImg,
			} {
				if !bytes.Equal(testutil.ReadFile(t, filepath.Join(out, isoPath)), testutil.ReadFile(t, src)) {
					t.Errorf("%s extracted by osirrox differs from its source", isoPath)
				}
			}
			esp := filepath.Join(out, BootImagePath)
			if out, err := exec.Command(fsck, "-n", esp).CombinedOutput(); err != nil {
				t.Errorf("fsck.fat: %v\n%s", err, out)
			}
			got := testutil.Run(t, mtype, "-i", esp, "::EFI/BOOT/BOOTX64.EFI")
			if !bytes.Equal(got, testutil.ReadFile(t, fx.uki)) {
				t.Error("UKI in the El Torito FAT image differs from its source")
			}
		})
	}
}

// TestReadBackWithGoDiskfs reads the tree back through go-diskfs' reader.
func TestReadBackWithGoDiskfs(t *testing.T) {
	fx := newFixture(t, 3*mib)
	iso := fx.write(t, fx.options())
	d, err := diskfs.Open(iso, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fs, err := d.GetFilesystem(0)
	if err != nil {
		t.Fatal(err)
	}
	for isoPath, src := range map[string]string{
		"/EFI/BOOT/BOOTX64.EFI": fx.uki,
		"/ROOT.IMG":             fx.rootImg,
	} {
		fh, err := fs.OpenFile(isoPath, os.O_RDONLY)
		if err != nil {
			t.Fatalf("%s: %v", isoPath, err)
		}
		got, err := io.ReadAll(fh)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, testutil.ReadFile(t, src)) {
			t.Errorf("%s read back differs", isoPath)
		}
	}
	// Every record, at every depth, carries SOURCE_DATE_EPOCH.
	n := 0
	for _, dir := range []string{".", "EFI", "EFI/BOOT", "BOOT"} {
		entries, err := fs.ReadDir(dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			n++
			if got := info.ModTime().Unix(); got != 1700000000 {
				t.Errorf("%s/%s dated %v, want SOURCE_DATE_EPOCH", dir, e.Name(), info.ModTime())
			}
		}
	}
	if n < 6 { // BOOT EFI ROOT.IMG BOOT/ BOOTX64.EFI BOOT.CAT EFIBOOT.IMG
		t.Errorf("read only %d entries", n)
	}
}

func TestReproducible(t *testing.T) {
	fx := newFixture(t, 2*mib)
	opts := fx.options()
	a := testutil.FileSHA256(t, fx.write(t, opts))
	b := testutil.FileSHA256(t, fx.write(t, opts))
	if a != b {
		t.Fatalf("two writes differ: %s vs %s", a, b)
	}
	opts.SourceDateEpoch += 3600
	if c := testutil.FileSHA256(t, fx.write(t, opts)); c == a {
		t.Error("a different SOURCE_DATE_EPOCH gave the same image")
	}
	// The volume descriptor's dates are the epoch, not the write time.
	pvd := testutil.ReadFile(t, filepath.Join(fx.dir, "image.iso"))[16*blockSize:]
	if got := string(pvd[pvdCreation : pvdCreation+14]); got != "20231114231320" {
		t.Errorf("PVD creation date %q", got)
	}
}

func TestISOPath(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"root.img", "/ROOT.IMG", ""},
		{"/boot/vmlinuz", "/BOOT/VMLINUZ", ""},
		{"A/B/C/D/E/F/G/H.TXT", "/A/B/C/D/E/F/G/H.TXT", ""},
		{"A/B/C/D/E/F/G/H/I.TXT", "", "invalid ISO path"},
		{"toolongname.img", "", "not an ISO 9660 level 1 name"},
		{"root.squashfs", "", "not an ISO 9660 level 1 name"},
		{"dir.d/x", "", "not an ISO 9660 level 1 name"},
		{"a-b.img", "", "not an ISO 9660 level 1 name"},
		{"../x", "", "invalid ISO path"},
		{"/", "", "invalid ISO path"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := isoPath(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("isoPath(%q) = %q, %v; want error %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("isoPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func FuzzISOPath(f *testing.F) {
	for _, s := range []string{"root.img", "/a/b.c", "..", "x/../../y", "ÄÖ.IMG", "a//b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := isoPath(p)
		if err != nil {
			return
		}
		// Accepted paths are canonical: absolute, upper case, idempotent.
		if !strings.HasPrefix(got, "/") || got != strings.ToUpper(got) {
			t.Fatalf("isoPath(%q) = %q", p, got)
		}
		if again, err := isoPath(got); err != nil || again != got {
			t.Fatalf("isoPath not idempotent: %q -> %q -> %q, %v", p, got, again, err)
		}
	})
}

func TestErrors(t *testing.T) {
	fx := newFixture(t, mib)
	empty := testutil.SparseZeros(t, fx.dir, "empty", 0)
	tests := []struct {
		name string
		mod  func(*Options)
		want string
		is   error
	}{
		{"no UKI", func(o *Options) { o.UKI = "" }, "no UKI", nil},
		{"empty UKI", func(o *Options) { o.UKI = empty }, "is empty", nil},
		{"missing UKI", func(o *Options) { o.UKI = filepath.Join(fx.dir, "nope") }, "UKI", os.ErrNotExist},
		{"missing file", func(o *Options) { o.Files = map[string]string{"X.IMG": filepath.Join(fx.dir, "nope")} }, "ISO file /X.IMG", os.ErrNotExist},
		{"bad name", func(o *Options) { o.Files = map[string]string{"root.squashfs": fx.rootImg} }, "level 1 name", nil},
		{"reserved path", func(o *Options) { o.Files = map[string]string{"boot/efiboot.img": fx.rootImg} }, "reserved", nil},
		{"duplicate path", func(o *Options) { o.Files = map[string]string{"x.img": fx.rootImg, "X.IMG": fx.rootImg} }, "given twice", nil},
		{"ESP file replaces UKI", func(o *Options) { o.ESPFiles = map[string]string{"efi/boot/BOOTX64.EFI": empty} }, "replace the UKI", nil},
		{"bad label", func(o *Options) { o.VolumeLabel = "my label" }, "volume label", nil},
		{"bad arch", func(o *Options) { o.Architecture = "s390x" }, "unsupported architecture", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := fx.options()
			tc.mod(&opts)
			dir := t.TempDir()
			p := filepath.Join(dir, "image.iso")
			err := Write(p, opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("error %v, want one containing %q (is %v)", err, tc.want, tc.is)
			}
			testutil.AssertEmptyDir(t, dir)
		})
	}
}

func TestFailedWriteLeavesNothing(t *testing.T) {
	fx := newFixture(t, mib)
	// A non-empty directory at path cannot be replaced by rename, so the
	// write fails at its very end.
	dir := t.TempDir()
	p := filepath.Join(dir, "image.iso")
	if err := os.MkdirAll(filepath.Join(p, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, fx.options()); err == nil {
		t.Fatal("Write over a directory succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "image.iso" || !entries[0].IsDir() {
		t.Errorf("directory holds %v, want only the untouched image.iso/", entries)
	}
}

// TestWriteDigest: the digest WriteDigest takes while writing is the
// file's sha256, with and without extra ISO and ESP files, for a UKI
// smaller and larger than El Torito's 32 MiB.
func TestWriteDigest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ukiSize int64
		extra   func(fx fixture, o *Options)
	}{
		{name: "UKI only", ukiSize: 5*mib + 3},
		{name: "large UKI", ukiSize: 40*mib + 1},
		{name: "ISO files", ukiSize: 5 * mib, extra: func(fx fixture, o *Options) { o.Files = map[string]string{"root.img": fx.rootImg} }},
		{name: "ESP files", ukiSize: 5 * mib, extra: func(fx fixture, o *Options) {
			o.ESPFiles = map[string]string{"loader/entries/a.conf": fx.rootImg}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t, tc.ukiSize)
			opts := Options{UKI: fx.uki, Seed: "digest", SourceDateEpoch: 1700000000}
			if tc.extra != nil {
				tc.extra(fx, &opts)
			}
			p := filepath.Join(fx.dir, "image.iso")
			sum, err := WriteDigest(p, opts)
			if err != nil {
				t.Fatal(err)
			}
			if want := testutil.FileSHA256(t, p); sum != want {
				t.Errorf("digest while writing %s, file %s", sum, want)
			}
		})
	}
}
