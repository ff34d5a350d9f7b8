package isoimage

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/diskfs/go-diskfs/backend/file"
)

// TestCoalescingBackendLeavesZerosOut: zeros past everything written stay
// holes (no block allocated); zeros over written bytes are written; the
// file reads back as everything written, in order.
func TestCoalescingBackendLeavesZerosOut(t *testing.T) {
	const mib = 1 << 20
	data := bytes.Repeat([]byte("x"), 2048)
	zeros := make([]byte, 8*mib)
	for _, tc := range []struct {
		name   string
		writes []struct {
			off int64
			p   []byte
		}
		size       int64 // the file's size afterwards (Truncate)
		maxBlocks  int64 // 512-byte blocks allocated at most
		wantZeroAt int64 // an offset that must read back zero
	}{
		{
			name: "hole past the end",
			writes: []struct {
				off int64
				p   []byte
			}{
				{0, data}, {2048, zeros}, {2048 + 8*mib, data},
			},
			size: 2*2048 + 8*mib, maxBlocks: 64, wantZeroAt: 4096,
		},
		{
			name: "zeros over data",
			writes: []struct {
				off int64
				p   []byte
			}{
				{0, bytes.Repeat([]byte("y"), 8*mib)}, {0, zeros},
			},
			size: 8 * mib, maxBlocks: 1 << 20, wantZeroAt: 0,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "iso"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c, err := newCoalescingBackend(file.New(f, false))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.writes {
				if _, err := c.WriteAt(w.p, w.off); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(tc.size); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, tc.size)
			if _, err := f.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			want := make([]byte, tc.size)
			for _, w := range tc.writes {
				copy(want[w.off:], w.p)
			}
			if !bytes.Equal(got, want) {
				t.Error("the file does not read back as what was written")
			}
			if got[tc.wantZeroAt] != 0 {
				t.Errorf("byte %d is %q, want 0", tc.wantZeroAt, got[tc.wantZeroAt])
			}
			var st syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			if st.Blocks > tc.maxBlocks {
				t.Errorf("%d blocks allocated, want at most %d", st.Blocks, tc.maxBlocks)
			}
		})
	}
}
