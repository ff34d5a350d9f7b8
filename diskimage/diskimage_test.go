package diskimage

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/partition/gpt"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// fixture is a UKI stand-in and a root image stand-in on disk.
type fixture struct {
	dir, uki, root string
}

func newFixture(t testing.TB, ukiSize, rootSize int64) fixture {
	t.Helper()
	dir := t.TempDir()
	return fixture{
		dir:  dir,
		uki:  writeInput(t, dir, "uki.efi", ukiSize, 1),
		root: writeInput(t, dir, "root.squashfs", rootSize, 2),
	}
}

func (fx fixture) options() Options {
	return Options{UKI: fx.uki, Root: fx.root, Seed: "hypervisor 1.0", SourceDateEpoch: 1700000000}
}

func (fx fixture) write(t testing.TB, opts Options) string {
	t.Helper()
	p := filepath.Join(fx.dir, "disk.raw")
	if err := Write(p, opts); err != nil {
		t.Fatalf("Write: %v", err)
	}
	return p
}

func TestPlanLayout(t *testing.T) {
	fx := newFixture(t, 3*MiB+17, 5*MiB+3)
	tests := []struct {
		name                      string
		mod                       func(*Options)
		espSize, rootSize, dataSz int64
	}{
		{"defaults", func(*Options) {}, MinESPSize, 6 * MiB, 0},
		{"fixed ESP", func(o *Options) { o.ESPSizeMiB = 100 }, 100 * MiB, 6 * MiB, 0},
		{"with data", func(o *Options) { o.DataSizeMiB = 10 }, MinESPSize, 6 * MiB, 10 * MiB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := fx.options()
			tc.mod(&opts)
			l, err := Plan(opts)
			if err != nil {
				t.Fatal(err)
			}
			if l.ESPStart != MiB || l.ESPSize != tc.espSize || l.RootSize != tc.rootSize || l.DataSize != tc.dataSz {
				t.Errorf("layout %+v", *l)
			}
			if l.RootStart != l.ESPStart+l.ESPSize || l.DiskSize != l.RootStart+l.RootSize+l.DataSize+MiB {
				t.Errorf("partitions not packed: %+v", *l)
			}
			for _, v := range []int64{l.ESPStart, l.ESPSize, l.RootStart, l.RootSize, l.DataStart, l.DataSize, l.DiskSize} {
				if v%MiB != 0 {
					t.Errorf("%d is not MiB aligned", v)
				}
			}
		})
	}
}

func TestESPSizeGrowsWithContent(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		size int64
		min  int64
	}{
		{1, MinESPSize},
		{100 * MiB, 100*MiB + espHeadroom},
		// Past 260 MiB go-diskfs switches to 4 KiB clusters; the size must
		// still give FAT32's minimum cluster count.
		{250 * MiB, 250*MiB + espHeadroom},
		{700 * MiB, 700*MiB + espHeadroom},
	}
	for _, tc := range tests {
		t.Run(strconv.FormatInt(tc.size, 10), func(t *testing.T) {
			uki := testutil.SparseZeros(t, dir, "uki", tc.size)
			size, err := FATImage{Files: map[string]string{"EFI/BOOT/BOOTX64.EFI": uki}}.Size()
			if err != nil {
				t.Fatal(err)
			}
			if size < tc.min || size%MiB != 0 {
				t.Errorf("size %d MiB, want >= %d MiB, MiB aligned", size/MiB, tc.min/MiB)
			}
			g, _ := geometryFor(size)
			if g.dataClusters < fatMinClusters {
				t.Errorf("%d MiB has %d clusters: not FAT32", size/MiB, g.dataClusters)
			}
		})
	}
}

// TestWriteVerifiedBySgdisk checks the partition table with gdisk, an
// independent GPT implementation.
func TestWriteVerifiedBySgdisk(t *testing.T) {
	sgdisk := testutil.RequireTool(t, "sgdisk")
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			fx := newFixture(t, 2*MiB, 3*MiB)
			opts := fx.options()
			opts.Architecture = arch
			opts.DataSizeMiB = 8
			p := fx.write(t, opts)

			if out := string(testutil.Run(t, sgdisk, "-v", p)); !strings.Contains(out, "No problems found") {
				t.Errorf("sgdisk -v:\n%s", out)
			}
			root := TypeRootAMD64
			if arch == "arm64" {
				root = TypeRootARM64
			}
			want := []struct {
				name, typ, attrs string
				first, last      int64
			}{
				{LabelESP, TypeESP, "0000000000000000", 2048, 2048 + 64*2048 - 1},
				{LabelRoot, root, "1000000000000000", 2048 + 64*2048, 2048 + 67*2048 - 1},
				{LabelData, TypeLinuxVar, "0000000000000000", 2048 + 67*2048, 2048 + 75*2048 - 1},
			}
			for i, w := range want {
				out := string(testutil.Run(t, sgdisk, "-i", strconv.Itoa(i+1), p))
				for _, s := range []string{
					"Partition GUID code: " + w.typ,
					"Partition name: '" + w.name + "'",
					"Attribute flags: " + w.attrs,
					fmt.Sprintf("First sector: %d ", w.first),
					fmt.Sprintf("Last sector: %d ", w.last),
					"Partition unique GUID: " + strings.ToUpper(seededGUID(opts.Seed, "partition:"+w.name)),
				} {
					if !strings.Contains(out, s) {
						t.Errorf("partition %d: want %q in\n%s", i+1, s, out)
					}
				}
			}
		})
	}
}

// TestESPReadByMtools reads the ESP back with mtools and dosfstools, which
// share no code with go-diskfs.
func TestESPReadByMtools(t *testing.T) {
	mtype := testutil.RequireTool(t, "mtype")
	mdir := testutil.RequireTool(t, "mdir")
	fx := newFixture(t, 5*MiB+123, MiB)
	opts := fx.options()
	opts.ESPFiles = map[string]string{
		"loader/loader.conf":       writeInput(t, fx.dir, "loader.conf", 100, 3),
		"EFI/Linux/extra-file.bin": writeInput(t, fx.dir, "extra", 70_000, 4),
		"empty":                    testutil.SparseZeros(t, fx.dir, "empty", 0),
	}
	p := fx.write(t, opts)
	img := fmt.Sprintf("%s@@%d", p, MiB)

	for fatPath, src := range map[string]string{
		"EFI/BOOT/BOOTX64.EFI":     fx.uki,
		"loader/loader.conf":       opts.ESPFiles["loader/loader.conf"],
		"EFI/Linux/extra-file.bin": opts.ESPFiles["EFI/Linux/extra-file.bin"],
		"empty":                    opts.ESPFiles["empty"],
	} {
		got := testutil.Run(t, mtype, "-i", img, "::"+fatPath)
		if !bytes.Equal(got, testutil.ReadFile(t, src)) {
			t.Errorf("%s: mtype read %d bytes that differ from the %d source bytes", fatPath, len(got), len(testutil.ReadFile(t, src)))
		}
	}
	listing := string(testutil.Run(t, mdir, "-i", img, "::EFI/BOOT"))
	if !strings.Contains(listing, "BOOTX64  EFI") {
		t.Errorf("mdir EFI/BOOT:\n%s", listing)
	}
	// Every entry carries SOURCE_DATE_EPOCH (2023-11-14 22:13:20 UTC; FAT
	// keeps 2-second steps).
	for _, dir := range []string{"::", "::EFI", "::EFI/BOOT"} {
		out := string(testutil.Run(t, mdir, "-a", "-i", img, dir))
		for _, line := range strings.Split(out, "\n") {
			if regexp.MustCompile(`\d{4}-\d\d-\d\d`).MatchString(line) && !strings.Contains(line, "2023-11-14") {
				t.Errorf("%s: entry not stamped with SOURCE_DATE_EPOCH: %q", dir, line)
			}
		}
	}
	{
		fsck := testutil.RequireTool(t, "fsck.fat")
		esp := filepath.Join(fx.dir, "esp.img")
		if err := os.WriteFile(esp, testutil.ReadRange(t, p, MiB, MinESPSize), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(fsck, "-n", "-v", esp).CombinedOutput(); err != nil {
			t.Errorf("fsck.fat: %v\n%s", err, out)
		} else if !strings.Contains(string(out), "32 bit entries") {
			t.Errorf("fsck.fat does not see FAT32:\n%s", out)
		}
	}
}

// TestReadBackWithGoDiskfs reads the table, the ESP and the root partition
// back through go-diskfs' reader.
func TestReadBackWithGoDiskfs(t *testing.T) {
	fx := newFixture(t, 3*MiB, 4*MiB+5)
	p := fx.write(t, fx.options())

	d, err := diskfs.Open(p, diskfs.WithOpenMode(diskfs.ReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	table, ok := d.Table.(*gpt.Table)
	if !ok {
		t.Fatalf("table is %T, want GPT", d.Table)
	}
	if len(table.Partitions) != 2 || table.Partitions[0].Name != LabelESP || table.Partitions[1].Name != LabelRoot {
		t.Fatalf("partitions: %+v", table.Partitions)
	}
	fs, err := d.GetFilesystem(1)
	if err != nil {
		t.Fatal(err)
	}
	fh, err := fs.OpenFile("/EFI/BOOT/BOOTX64.EFI", os.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(fh)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, testutil.ReadFile(t, fx.uki)) {
		t.Error("UKI read back through go-diskfs differs")
	}
	var root bytes.Buffer
	if _, err := d.ReadPartitionContents(2, &root); err != nil {
		t.Fatal(err)
	}
	want := testutil.ReadFile(t, fx.root)
	if !bytes.Equal(root.Bytes()[:len(want)], want) {
		t.Error("root partition does not start with the root image")
	}
	if rest := root.Bytes()[len(want):]; len(bytes.Trim(rest, "\x00")) != 0 {
		t.Error("root partition padding is not zero")
	}
}

func TestReproducible(t *testing.T) {
	fx := newFixture(t, 2*MiB, 2*MiB)
	opts := fx.options()
	opts.DataSizeMiB = 16 // the ext4 file system must be reproducible too
	a := testutil.FileSHA256(t, fx.write(t, opts))
	b := testutil.FileSHA256(t, fx.write(t, opts))
	if a != b {
		t.Fatalf("two writes differ: %s vs %s", a, b)
	}
	opts.Seed = "another build"
	if c := testutil.FileSHA256(t, fx.write(t, opts)); c == a {
		t.Error("a different seed gave the same image")
	}
	opts = fx.options()
	opts.DataSizeMiB = 16
	opts.SourceDateEpoch += 3600
	if c := testutil.FileSHA256(t, fx.write(t, opts)); c == a {
		t.Error("a different SOURCE_DATE_EPOCH gave the same image")
	}
}

// TestSparse checks that unused space is not stored: a mostly empty ESP
// must not take its apparent size on disk.
func TestSparse(t *testing.T) {
	fx := newFixture(t, MiB, MiB)
	opts := fx.options()
	opts.ESPSizeMiB = 256
	opts.DataSizeMiB = 512
	p := fx.write(t, opts)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	du := testutil.RequireTool(t, "du")
	fields := strings.Fields(string(testutil.Run(t, du, "-k", p)))
	usedKiB, err := strconv.ParseInt(fields[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	apparentKiB := fi.Size() / 1024
	t.Logf("apparent %d KiB, on disk %d KiB", apparentKiB, usedKiB)
	if apparentKiB < 770*1024 || usedKiB > 16*1024 {
		t.Errorf("on-disk usage %d KiB for %d KiB apparent: not sparse", usedKiB, apparentKiB)
	}
}

func TestErrors(t *testing.T) {
	fx := newFixture(t, 40*MiB, MiB)
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
		{"no root", func(o *Options) { o.Root = "" }, "no root image", nil},
		{"missing root", func(o *Options) { o.Root = filepath.Join(fx.dir, "nope") }, "root image", os.ErrNotExist},
		{"empty root", func(o *Options) { o.Root = empty }, "is empty", nil},
		{"ESP smaller than UKI", func(o *Options) { o.ESPSizeMiB = 40 }, "ESP of 40 MiB", ErrESPTooSmall},
		{"ESP too small for FAT32", func(o *Options) { o.ESPSizeMiB = 32 }, "FAT32 needs at least 65525", ErrESPTooSmall},
		{"bad arch", func(o *Options) { o.Architecture = "riscv64" }, "unsupported architecture", nil},
		{"ESP file replaces UKI", func(o *Options) { o.ESPFiles = map[string]string{"EFI/BOOT/BOOTX64.EFI": empty} }, "replace the UKI", nil},
		{"ESP case collision", func(o *Options) { o.ESPFiles = map[string]string{"efi/boot/bootx64.efi": empty} }, "collide", nil},
		{"ESP file escapes", func(o *Options) { o.ESPFiles = map[string]string{"../x": empty} }, "invalid FAT path", nil},
		{"data too small for ext4", func(o *Options) { o.DataSizeMiB = MinDataSizeMiB - 1 }, "invalid partition sizes", nil},
		{"data beyond the bound", func(o *Options) { o.DataSizeMiB = dataSizeLimMiB + 1 }, "invalid partition sizes", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := fx.options()
			tc.mod(&opts)
			p := filepath.Join(t.TempDir(), "disk.raw")
			err := Write(p, opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("error %v, want one containing %q (is %v)", err, tc.want, tc.is)
			}
			if _, serr := os.Stat(p); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("%s exists after a failed write", p)
			}
		})
	}
}

// failingReader returns n good bytes and then an error.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("injected read failure")
	}
	k := min(len(p), r.n)
	clear(p[:k])
	p[0] = 1
	r.n -= k
	return k, nil
}
func (r *failingReader) Close() error { return nil }

func TestFailedWriteLeavesNothing(t *testing.T) {
	fx := newFixture(t, MiB, 3*MiB)
	t.Run("read failure mid-copy", func(t *testing.T) {
		orig := openInput
		t.Cleanup(func() { openInput = orig })
		openInput = func(name string) (io.ReadCloser, error) {
			if name == fx.root {
				return &failingReader{n: 2 << 20}, nil
			}
			return orig(name)
		}
		p := filepath.Join(t.TempDir(), "disk.raw")
		err := Write(p, fx.options())
		if err == nil || !strings.Contains(err.Error(), "injected read failure") {
			t.Fatalf("error %v, want the injected failure", err)
		}
		testutil.AssertEmptyDir(t, filepath.Dir(p))
	})
	t.Run("input shrinks", func(t *testing.T) {
		orig := openInput
		t.Cleanup(func() { openInput = orig })
		openInput = func(name string) (io.ReadCloser, error) {
			if name == fx.uki {
				return io.NopCloser(io.LimitReader(bytes.NewReader(testutil.ReadFile(t, name)), MiB/2)), nil
			}
			return orig(name)
		}
		p := filepath.Join(t.TempDir(), "disk.raw")
		if err := Write(p, fx.options()); err == nil || !strings.Contains(err.Error(), "input ended") {
			t.Fatalf("error %v, want a short input", err)
		}
		testutil.AssertEmptyDir(t, filepath.Dir(p))
	})
	t.Run("rename fails", func(t *testing.T) {
		// A non-empty directory at path cannot be replaced by rename.
		dir := t.TempDir()
		p := filepath.Join(dir, "disk.raw")
		if err := os.MkdirAll(filepath.Join(p, "keep"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := Write(p, fx.options()); err == nil {
			t.Fatal("Write over a directory succeeded")
		}
		if left, _ := filepath.Glob(filepath.Join(dir, ".disk.raw.*")); len(left) != 0 {
			t.Errorf("temporary files left behind: %v", left)
		}
		if fi, err := os.Stat(p); err != nil || !fi.IsDir() {
			t.Error("the directory at path was disturbed")
		}
	})
	t.Run("directory missing", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "no", "such", "dir", "disk.raw")
		if err := Write(p, fx.options()); err == nil {
			t.Fatal("Write into a missing directory succeeded")
		}
	})
}

func TestCopySparse(t *testing.T) {
	data := make([]byte, 3*sparseBlock+100)
	data[0] = 1
	data[2*sparseBlock+5] = 2
	data[len(data)-1] = 3
	tests := []struct {
		name    string
		in      []byte
		size    int64
		wantErr string
	}{
		{"exact", data, int64(len(data)), ""},
		{"short", data[:100], int64(len(data)), "input ended"},
		{"long", data, int64(len(data)) - 1, "longer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &recordingWriter{buf: make([]byte, len(data)+10)}
			err := copySparse(w, 10, bytes.NewReader(tc.in), tc.size)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w.buf[10:], data) {
				t.Error("content differs")
			}
			// Blocks 0 and 2..3 hold data; block 1 is zero and skipped.
			if w.written != int64(len(data))-sparseBlock {
				t.Errorf("wrote %d bytes, want %d (zero block skipped)", w.written, len(data)-sparseBlock)
			}
		})
	}
}

type recordingWriter struct {
	buf     []byte
	written int64
}

func (w *recordingWriter) WriteAt(p []byte, off int64) (int, error) {
	w.written += int64(len(p))
	return copy(w.buf[off:], p), nil
}

// TestDataPartitionIsExt4 checks the osb-data partition with e2fsprogs: a
// clean, empty ext4 file system labelled osb-data, 4 KiB blocks (it is
// grown at first boot), UUID derived from the seed, filling the partition.
func TestDataPartitionIsExt4(t *testing.T) {
	dumpe2fs := testutil.RequireTool(t, "dumpe2fs")
	e2fsck := testutil.RequireTool(t, "e2fsck")
	fx := newFixture(t, MiB, 3*MiB)
	opts := fx.options()
	opts.DataSizeMiB = 64
	p := fx.write(t, opts)
	l, err := Plan(opts)
	if err != nil {
		t.Fatal(err)
	}
	if l.DataStart != l.RootStart+l.RootSize || l.DiskSize != l.DataStart+l.DataSize+MiB {
		t.Fatalf("osb-data at %d+%d on a %d-byte disk: not last before the backup GPT", l.DataStart, l.DataSize, l.DiskSize)
	}
	part := testutil.WriteFile(t, t.TempDir(), "data.ext4", testutil.ReadRange(t, p, l.DataStart, l.DataSize))
	testutil.Run(t, e2fsck, "-fn", part)
	hdr := string(testutil.Run(t, dumpe2fs, "-h", part))
	for _, want := range []string{
		"Filesystem volume name:   " + LabelData,
		"Filesystem UUID:          " + seededGUID(opts.Seed, "ext4-uuid:"+LabelData),
		"Block size:               4096",
		"Block count:              " + strconv.FormatInt(64*MiB/4096, 10),
		"Filesystem features:      has_journal",
	} {
		if !strings.Contains(hdr, want) {
			t.Errorf("dumpe2fs -h lacks %q:\n%s", want, hdr)
		}
	}
}

// TestCopyExtents copies files with holes at their start, middle and end
// and checks the bytes and that only data extents were read and written.
func TestCopyExtents(t *testing.T) {
	const mb = 1 << 20
	tests := []struct {
		name string
		data []int64 // offsets of 1-byte writes; the file is 8 MiB
	}{
		{"all holes", nil},
		{"data at both ends", []int64{0, 8*mb - 1}},
		{"data in the middle", []int64{3 * mb, 3*mb + 4096, 5 * mb}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "scratch")
			f, err := os.Create(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(8 * mb); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, 8*mb)
			for i, off := range tc.data {
				want[off] = byte(i + 1)
				if _, err := f.WriteAt(want[off:off+1], off); err != nil {
					t.Fatal(err)
				}
			}
			w := &recordingWriter{buf: make([]byte, 8*mb+10)}
			if err := copyExtents(w, 10, f, 8*mb); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w.buf[10:], want) {
				t.Error("content differs")
			}
			if max := int64(len(tc.data)) * sparseBlock; w.written > max {
				t.Errorf("wrote %d bytes, want at most %d (one block per byte of data)", w.written, max)
			}
			if err := copyExtents(w, 10, f, 8*mb+1); err == nil {
				t.Error("copied a file of another size than planned")
			}
		})
	}
}
