package disk

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/initrd/gpt"
	"github.com/ironcore-dev/os-builder/initrd/gpt/gpttest"
)

// testImage is a real os-builder disk image; see gpttest.DiskImage.
func testImage(t testing.TB, rootSize int) []byte { return gpttest.DiskImage(t, rootSize) }

func TestClassifyDisk(t *testing.T) {
	img := testImage(t, 1<<20)
	size := int64(len(img))
	mk := func(f func(b []byte)) []byte { b := make([]byte, size); f(b); return b }
	foreignGPT := func() []byte {
		tb := &gpt.Table{SectorSize: 512, Partitions: []gpt.Partition{{Index: 1, Type: gpt.MustGUID(gpt.TypeESP), FirstLBA: 2048, LastLBA: 4095, Name: "EFI system partition"}}}
		p, bk, off, _ := tb.Encode(size)
		return mk(func(b []byte) { copy(b, p); copy(b[off:], bk) })
	}()
	for _, tc := range []struct {
		name   string
		disk   []byte
		want   Kind
		reason string
	}{
		{"zeros", make([]byte, size), Blank, ""},
		{"our image", img, Ours, ""},
		{"foreign GPT", foreignGPT, Foreign, `"EFI system partition"`},
		{"MBR", mk(func(b []byte) { b[510], b[511] = 0x55, 0xaa }), Foreign, "MBR"},
		{"ext4 on the whole disk", mk(func(b []byte) { b[1080], b[1081] = 0x53, 0xef }), Foreign, "ext2/3/4"},
		{"LVM", mk(func(b []byte) { copy(b[512:], "LABELONE"); copy(b[512+24:], "LVM2 001") }), Foreign, "LVM"},
		{"damaged GPT", mk(func(b []byte) { copy(b, img[:34*512]); b[600] ^= 1 }), Foreign, "damaged GPT"},
	} {
		k, _, reason, err := Classify(bytes.NewReader(tc.disk), 512, size)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if k != tc.want || !strings.Contains(reason, tc.reason) {
			t.Errorf("%s: %v (%s), want %v (%s)", tc.name, k, reason, tc.want, tc.reason)
		}
	}
}

func newDisk(t *testing.T, size int64) *os.File {
	f, err := os.Create(filepath.Join(t.TempDir(), "disk"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// install streams img onto disk as installMode does, in chunks of odd
// sizes, stopping after stopAfter bytes if >= 0 (a killed VM).
func install(t *testing.T, disk *os.File, img []byte, stopAfter int) (*Installer, error) {
	t.Helper()
	return installWipe(t, disk, img, stopAfter, false)
}

// installWipe is install with osb.install.wipe=1 when wipe: a foreign disk
// is overwritten, its data partition not kept.
func installWipe(t *testing.T, disk *os.File, img []byte, stopAfter int, wipe bool) (*Installer, error) {
	t.Helper()
	size, _ := disk.Seek(0, io.SeekEnd)
	kind, tb, reason, err := Classify(disk, 512, size)
	if err != nil {
		t.Fatal(err)
	}
	if err := AdmitTarget(disk.Name(), kind, reason, wipe); err != nil {
		t.Fatal(err)
	}
	if kind == Foreign {
		tb = nil
	}
	var keep *gpt.Partition
	if tb != nil {
		keep = tb.ByName(PartLabelData)
	}
	s := &Installer{disk: disk, sectorSize: 512, size: size, keep: keep, logf: t.Logf}
	w, _ := s.Begin(int64(len(img)))
	data := img
	if stopAfter >= 0 {
		data = img[:stopAfter]
	}
	for len(data) > 0 {
		n := min(len(data), 777777)
		if _, err := w.Write(data[:n]); err != nil {
			return s, err
		}
		data = data[n:]
	}
	if stopAfter >= 0 {
		return s, nil
	}
	if err := WriteTable(disk, s.plan.table, size, true); err != nil {
		t.Fatal(err)
	}
	return s, nil
}

func partBytes(t *testing.T, disk io.ReaderAt, size int64, name string) []byte {
	t.Helper()
	tb, err := gpt.Read(disk, 512, size)
	if err != nil {
		t.Fatal(err)
	}
	p := tb.ByName(name)
	if p == nil {
		t.Fatalf("no %s in %+v", name, tb.Partitions)
	}
	s, e := p.ByteRange(512)
	b := make([]byte, e-s)
	disk.ReadAt(b, s)
	return b
}

func TestInstallKeepsDataAndSurvivesInterruption(t *testing.T) {
	img := testImage(t, 2<<20)
	const size = 256 << 20
	disk := newDisk(t, size)
	if _, err := install(t, disk, img, -1); err != nil {
		t.Fatal(err)
	}
	imgT, _ := gpt.Read(bytes.NewReader(img), 512, int64(len(img)))
	for _, name := range []string{PartLabelESP, PartLabelRoot} {
		if !bytes.Equal(partBytes(t, disk, size, name), partBytes(t, bytes.NewReader(img), int64(len(img)), name)) {
			t.Errorf("%s differs from the image's", name)
		}
	}
	// A data partition as the first boot creates it, with some data.
	tb, _ := gpt.Read(disk, 512, size)
	_, rootEnd := imgT.ByName(PartLabelRoot).ByteRange(512)
	_, last := tb.Usable(size)
	start, err := DataPartitionStart(rootEnd, int64(last+1)*512/mib*mib)
	if err != nil {
		t.Fatal(err)
	}
	tb.Partitions = append(tb.Partitions, gpt.Partition{Index: 3, Type: gpt.MustGUID(gpt.TypeLinuxVar), GUID: gpt.MustGUID("bbbbbbbb-2222-3333-4444-555555555555"), Name: PartLabelData, FirstLBA: uint64(start / 512), LastLBA: last})
	if err := WriteTable(disk, tb, size, true); err != nil {
		t.Fatal(err)
	}
	marker := []byte("persisted data")
	disk.WriteAt(marker, start+4096)

	// Reinstall, killed half way: the disk no longer boots (no ESP) but is
	// recognised as ours with the data partition.
	if _, err := install(t, disk, img, len(img)/2); err != nil {
		t.Fatal(err)
	}
	kind, mid, _, _ := Classify(disk, 512, size)
	if kind != Ours || mid.ByName(PartLabelESP) != nil || mid.ByName(PartLabelData) == nil {
		t.Fatalf("after an interrupted install: %v %+v", kind, mid)
	}
	// Install again: completes, data kept.
	if _, err := install(t, disk, img, -1); err != nil {
		t.Fatal(err)
	}
	final, _ := gpt.Read(disk, 512, size)
	if len(final.Partitions) != 3 || final.ByName(PartLabelData).FirstLBA != uint64(start/512) {
		t.Errorf("final table %+v", final.Partitions)
	}
	got := make([]byte, len(marker))
	disk.ReadAt(got, start+4096)
	if !bytes.Equal(got, marker) {
		t.Error("data partition contents lost")
	}
	if sha256.Sum256(partBytes(t, disk, size, PartLabelRoot)) != sha256.Sum256(partBytes(t, bytes.NewReader(img), int64(len(img)), PartLabelRoot)) {
		t.Error("root differs after reinstall")
	}
}

// TestInstallClearsTheStartOfAForeignDisk installs with
// osb.install.wipe=1 over a disk whose first MiB holds signatures where
// the GPT does not write (a LUKS2 secondary header at 32 KiB, a btrfs
// superblock at 64 KiB): the installer's own disk, interrupted or
// complete, must be ours on the next run, not refused for what was there
// before. Classify trusts no GPT over a signature in the first MiB;
// before the installer zeroed it, the leftovers made its disk foreign.
func TestInstallClearsTheStartOfAForeignDisk(t *testing.T) {
	img := testImage(t, 2<<20)
	const size = 256 << 20
	for _, tc := range []struct {
		name      string
		stopAfter int
	}{
		{"interrupted after the interim table", 3 << 20},
		{"complete", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := sparseDisk(t, size, map[int64][]byte{32 << 10: []byte("SKUL\xba\xbe\x00\x02"), 65536 + 64: []byte("_BHRfS_M")})
			if kind, _, _, _ := Classify(disk, 512, size); kind != Foreign {
				t.Fatalf("before: %v", kind)
			}
			if _, err := installWipe(t, disk, img, tc.stopAfter, true); err != nil {
				t.Fatal(err)
			}
			if kind, _, reason, err := Classify(disk, 512, size); err != nil || kind != Ours {
				t.Fatalf("after: %v (%s), %v", kind, reason, err)
			}
		})
	}
}

func TestPlanInstallRefusals(t *testing.T) {
	img := testImage(t, 4<<20)
	imgT, _ := gpt.Read(bytes.NewReader(img), 512, int64(len(img)))
	_, rootEnd := imgT.ByName(PartLabelRoot).ByteRange(512)
	data := &gpt.Partition{Index: 3, Type: gpt.MustGUID(gpt.TypeLinuxVar), Name: PartLabelData, FirstLBA: uint64(rootEnd/512) - 2048, LastLBA: 1 << 20}
	if _, err := planInstall(imgT, 512, 1<<30, data); err == nil || !strings.Contains(err.Error(), "preserved osb-data") {
		t.Errorf("data partition in the way: %v", err)
	}
	if _, err := planInstall(imgT, 512, rootEnd-1<<20, nil); err == nil || !strings.Contains(err.Error(), "end of the disk") {
		t.Errorf("disk too small: %v", err)
	}
	noRoot := &gpt.Table{SectorSize: 512, Partitions: imgT.Partitions[:1]}
	if _, err := planInstall(noRoot, 512, 1<<30, nil); err == nil || !strings.Contains(err.Error(), "os-builder disk image") {
		t.Errorf("no root: %v", err)
	}
	// Data partition that reused slot 1 or 2 gets slot 3.
	ok := &gpt.Partition{Index: 2, Type: gpt.MustGUID(gpt.TypeLinuxVar), Name: PartLabelData, FirstLBA: uint64(rootEnd / 512), LastLBA: uint64(rootEnd/512) + 4096}
	p, err := planInstall(imgT, 512, 1<<30, ok)
	if err != nil {
		t.Fatal(err)
	}
	if d := p.table.ByName(PartLabelData); d.Index != 3 || len(p.interim.Partitions) != 1 {
		t.Errorf("plan %+v", p.table.Partitions)
	}
}

func TestDataPartitionStart(t *testing.T) {
	for _, tc := range []struct {
		rootEnd, usableEnd, want int64
		err                      bool
	}{
		{300 * mib, 100 * gib, 600 * mib, false},   // room: leave the OS region doubled
		{300*mib + 1, 100 * gib, 601 * mib, false}, // aligned up
		{600 * mib, 2 * gib, 600 * mib, false},     // tight: right after root
		{600 * mib, 600*mib + 10*mib, 0, true},     // too small
	} {
		got, err := DataPartitionStart(tc.rootEnd, tc.usableEnd)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("DataPartitionStart(%d, %d) = %d, %v; want %d", tc.rootEnd, tc.usableEnd, got, err, tc.want)
		}
	}
}
