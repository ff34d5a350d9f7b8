package qcow2_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/diskimage/qcow2"
	"github.com/ironcore-dev/os-builder/diskimage/qcow2/qcow2test"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// writeQcow2 converts the raw image at raw into a qcow2 file at dst.
func writeQcow2(t testing.TB, raw, dst string) *qcow2.Layout {
	t.Helper()
	f, err := os.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	l, err := qcow2.Scan(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	n, err := l.WriteTo(f, out)
	if err != nil {
		t.Fatal(err)
	}
	if n != l.Size() {
		t.Fatalf("wrote %d bytes, Size says %d", n, l.Size())
	}
	return l
}

// syntheticRaw writes a sparse raw disk that spans three L2 tables (an L2
// table covers 512 MiB), with data at the first byte, across a cluster
// boundary, alone in the second L2 range and in a short last cluster; the
// third L2 range but its end stays zero.
func syntheticRaw(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.raw")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := int64(1<<30) + 3*512<<20/3 + 512 // not a whole number of clusters
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		off  int64
		data string
	}{
		{0, "first byte"},
		{qcow2.ClusterSize - 3, "across a cluster boundary"},
		{600 << 20, "second L2 range"},
		{size - 7, "the end"},
	} {
		if _, err := f.WriteAt([]byte(w.data), w.off); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func fileSHA(t testing.TB, p string) [32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

// toRaw converts a qcow2 file back with the test reader.
func toRaw(t testing.TB, q, dst string) {
	t.Helper()
	f, err := os.Open(q)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	img, err := qcow2test.Open(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := out.Truncate(img.VirtualSize); err != nil {
		t.Fatal(err)
	}
	if err := img.WriteRaw(out); err != nil {
		t.Fatal(err)
	}
}

// checkWithQemuImg is the outside proof: qemu-img finds no errors or leaks
// in the image and reads the same disk from it as from the raw file.
func checkWithQemuImg(t testing.TB, raw, q string) {
	t.Helper()
	qi := testutil.RequireTool(t, "qemu-img")
	out := testutil.Run(t, qi, "check", "-f", "qcow2", q)
	if !strings.Contains(string(out), "No errors were found on the image.") {
		t.Errorf("qemu-img check: %s", out)
	}
	out = testutil.Run(t, qi, "compare", "-f", "raw", "-F", "qcow2", raw, q)
	if !strings.Contains(string(out), "Images are identical.") {
		t.Errorf("qemu-img compare: %s", out)
	}
	info := testutil.Run(t, qi, "info", "--output=json", q)
	for _, want := range []string{`"compat": "1.1"`, `"format": "qcow2"`, `"cluster-size": 65536`} {
		if !strings.Contains(string(info), want) {
			t.Errorf("qemu-img info lacks %s:\n%s", want, info)
		}
	}
	if strings.Contains(string(info), "backing-filename") {
		t.Errorf("qemu-img info names a backing file:\n%s", info)
	}
}

// TestSyntheticDisk: a sparse disk over three L2 ranges converts to a qcow2
// that qemu-img checks clean and compares identical, whose zero clusters
// are not stored, whose bytes are the same on a second write, and which the
// test reader turns back into the same raw bytes.
func TestSyntheticDisk(t *testing.T) {
	raw := syntheticRaw(t)
	dir := t.TempDir()
	q := filepath.Join(dir, "disk.qcow2")
	l := writeQcow2(t, raw, q)
	// 4 data clusters (the first two writes share cluster 0, the second
	// spans into cluster 1), in 2 of the 3 L2 ranges.
	if l.DataClusters() != 4 {
		t.Errorf("%d data clusters, want 4", l.DataClusters())
	}
	if l.Size() > 16*qcow2.ClusterSize {
		t.Errorf("qcow2 of a nearly empty disk is %d bytes", l.Size())
	}
	checkWithQemuImg(t, raw, q)
	again := filepath.Join(dir, "again.qcow2")
	writeQcow2(t, raw, again)
	if fileSHA(t, q) != fileSHA(t, again) {
		t.Error("two writes of the same disk differ")
	}
	back := filepath.Join(dir, "back.raw")
	toRaw(t, q, back)
	if out := testutil.Run(t, "qemu-img", "compare", "-f", "raw", "-F", "raw", raw, back); !strings.Contains(string(out), "Images are identical.") {
		t.Errorf("the test reader's raw differs from the original: %s", out)
	}
}

// TestOutputDisk converts the test image's disk.raw (make test-image) and
// has qemu-img check and compare it; it logs the sizes for the record.
func TestOutputDisk(t *testing.T) {
	raw := filepath.Join(testutil.Output(t, testutil.TestOutputEnv), "disk.raw")
	q := filepath.Join(t.TempDir(), "disk.qcow2")
	start := time.Now()
	l := writeQcow2(t, raw, q)
	t.Logf("disk.raw %d bytes -> disk.qcow2 %d bytes (%d data clusters) in %v", l.VirtualSize(), l.Size(), l.DataClusters(), time.Since(start).Round(time.Millisecond))
	checkWithQemuImg(t, raw, q)
}

// TestScanRefuses: sizes the format (or the bound) cannot take.
func TestScanRefuses(t *testing.T) {
	for _, tc := range []struct {
		size int64
		want string
	}{
		{0, "positive multiple of 512"},
		{1000, "positive multiple of 512"},
		{qcow2.MaxVirtualSize + 512, "limit"},
	} {
		_, err := qcow2.Scan(bytes.NewReader(nil), tc.size)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Scan of %d bytes: %v, want %q", tc.size, err, tc.want)
		}
	}
	// A raw image shorter than it claims.
	if _, err := qcow2.Scan(bytes.NewReader(make([]byte, 512)), 1024); err == nil || !strings.Contains(err.Error(), "shorter") {
		t.Errorf("short raw image: %v", err)
	}
}

// TestWriteRefusesChangedDisk: a disk that changes between scan and write
// fails the write instead of giving a qcow2 that does not match its scan.
func TestWriteRefusesChangedDisk(t *testing.T) {
	disk := make([]byte, 4*qcow2.ClusterSize)
	l, err := qcow2.Scan(bytes.NewReader(disk), int64(len(disk)))
	if err != nil {
		t.Fatal(err)
	}
	disk[2*qcow2.ClusterSize+5] = 1
	if _, err := l.WriteTo(bytes.NewReader(disk), io.Discard); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("changed disk: %v", err)
	}
}

// TestReaderRefusesBackingFile: a qcow2 layer that needs a backing file
// (made by qemu-img, and by patching our own header) is refused by name.
func TestReaderRefusesBackingFile(t *testing.T) {
	qi := testutil.RequireTool(t, "qemu-img")
	dir := t.TempDir()
	base, over := filepath.Join(dir, "base.qcow2"), filepath.Join(dir, "over.qcow2")
	testutil.Run(t, qi, "create", "-q", "-f", "qcow2", base, "1M")
	testutil.Run(t, qi, "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", over)
	b, err := os.ReadFile(over)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qcow2test.Open(bytes.NewReader(b), int64(len(b))); err == nil || !strings.Contains(err.Error(), "backing file") {
		t.Errorf("qemu-img overlay: %v, want a backing file refusal", err)
	}

	var buf bytes.Buffer
	disk := make([]byte, qcow2.ClusterSize)
	disk[0] = 1
	l, err := qcow2.Scan(bytes.NewReader(disk), int64(len(disk)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.WriteTo(bytes.NewReader(disk), &buf); err != nil {
		t.Fatal(err)
	}
	own := buf.Bytes()
	binary.BigEndian.PutUint64(own[8:], 200) // backing file name at 200
	binary.BigEndian.PutUint32(own[16:], 4)
	copy(own[200:], "base")
	if _, err := qcow2test.Open(bytes.NewReader(own), int64(len(own))); err == nil || !strings.Contains(err.Error(), "backing file") {
		t.Errorf("patched header: %v, want a backing file refusal", err)
	}
}

// FuzzReader: any bytes give an image or an error, never a panic or an
// unbounded allocation; what opens converts within its virtual size.
func FuzzReader(f *testing.F) {
	disk := make([]byte, 3*qcow2.ClusterSize)
	copy(disk[qcow2.ClusterSize:], "data")
	l, err := qcow2.Scan(bytes.NewReader(disk), int64(len(disk)))
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := l.WriteTo(bytes.NewReader(disk), &buf); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:104])
	f.Fuzz(func(t *testing.T, b []byte) {
		img, err := qcow2test.Open(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if img.VirtualSize > 64<<20 {
			return // valid but large: converting it proves nothing more
		}
		out := &sliceWriter{b: make([]byte, img.VirtualSize)}
		_ = img.WriteRaw(out)
	})
}

// sliceWriter is an io.WriterAt over a fixed slice: a write past its end
// is the reader's bug.
type sliceWriter struct{ b []byte }

func (s *sliceWriter) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > int64(len(s.b)) {
		panic(fmt.Sprintf("write of %d bytes at %d past the %d-byte disk", len(p), off, len(s.b)))
	}
	return copy(s.b[off:], p), nil
}
