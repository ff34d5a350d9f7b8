package diskimage

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestWriteDigest: the digest taken while writing is the file's, with and
// without a data partition, and the image is the one Write makes.
func TestWriteDigest(t *testing.T) {
	fx := newFixture(t, 3*MiB+17, 5*MiB+3)
	for name, data := range map[string]int64{"no data": 0, "data": MinDataSizeMiB} {
		t.Run(name, func(t *testing.T) {
			opts := fx.options()
			opts.DataSizeMiB = data
			plain := fx.write(t, opts)
			want := testutil.FileSHA256(t, plain)
			p := filepath.Join(t.TempDir(), "disk.raw")
			got, err := WriteDigest(p, opts)
			if err != nil {
				t.Fatal(err)
			}
			if file := testutil.FileSHA256(t, p); got != file || file != want {
				t.Fatalf("digest while writing %s, file %s, Write's image %s", got, file, want)
			}
		})
	}
}

// recordWriter takes writes and forgets them.
type recordWriter struct{ n int }

func (r *recordWriter) WriteAt(p []byte, off int64) (int, error) { r.n++; return len(p), nil }

// TestOrderedHashRefusesGoingBack: a write behind what was hashed cannot be
// hashed in order, and says so rather than giving a wrong digest.
func TestOrderedHashRefusesGoingBack(t *testing.T) {
	for name, writes := range map[string][][2]int64{
		"back":              {{0, 10}, {5, 10}},
		"across the tail":   {{90, 20}},
		"tail twice":        {{100, 4}, {100, 4}},
		"tail over the end": {{126, 4}},
	} {
		t.Run(name, func(t *testing.T) {
			h := newOrderedHash(&recordWriter{}, 100)
			for _, w := range writes {
				if _, err := h.WriteAt(bytes.Repeat([]byte{1}, int(w[1])), w[0]); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := h.sum(128); !errors.Is(err, errUnordered) {
				t.Fatalf("sum: %v, want errUnordered", err)
			}
		})
	}
	// Gaps are zeros, the tail comes last.
	h := newOrderedHash(&recordWriter{}, 100)
	h.WriteAt([]byte{9}, 120)
	h.WriteAt([]byte{1, 2}, 3)
	got, err := h.sum(128)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 128)
	want[3], want[4], want[120] = 1, 2, 9
	if dir := t.TempDir(); got != testutil.FileSHA256(t, testutil.WriteFile(t, dir, "want", want)) {
		t.Fatal("digest differs from the bytes written")
	}
}
