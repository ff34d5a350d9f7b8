package pid1

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRootFSType(t *testing.T) {
	dir := t.TempDir()
	sq := make([]byte, 4096)
	copy(sq, "hsqs")
	ero := make([]byte, 4096)
	copy(ero[1024:], []byte{0xe2, 0xe1, 0xf5, 0xe0})
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{"squashfs": {sq, "squashfs"}, "erofs": {ero, "erofs"}, "other": {make([]byte, 4096), ""}} {
		// At the start of a file and at a part's offset in a root stack.
		p := filepath.Join(dir, name)
		os.WriteFile(p, append(make([]byte, 8192), tc.b...), 0o644)
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got, err := fsTypeAt(f, 8192)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("%s: %q, %v", name, got, err)
		}
	}
}
