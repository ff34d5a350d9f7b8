package fsroot

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOpenFileIn: a file handed on in a directory is read there; a link
// out of the directory (absolute or climbing) reads nothing outside.
func TestOpenFileIn(t *testing.T) {
	parent := t.TempDir()
	secret := filepath.Join(parent, "db.key")
	dir := filepath.Join(parent, "out")
	for _, err := range []error{
		os.WriteFile(secret, []byte("secret"), 0o600),
		os.Mkdir(dir, 0o755),
		os.WriteFile(filepath.Join(dir, "a"), []byte("inside"), 0o644),
		os.Symlink("a", filepath.Join(dir, "in")),
		os.Symlink(secret, filepath.Join(dir, "abs")),
		os.Symlink("../db.key", filepath.Join(dir, "up")),
		os.Mkdir(filepath.Join(dir, "d"), 0o755),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, want string
	}{{"a", "inside"}, {"in", "inside"}, {"abs", ""}, {"up", ""}, {"d", ""}} {
		b, err := ReadPath(filepath.Join(dir, tc.name), 1<<10)
		if string(b) != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("ReadPath %s: %q, %v; want %q", tc.name, b, err, tc.want)
		}
		f, err := OpenFileIn(dir, tc.name)
		if (err == nil) != (tc.want != "") {
			t.Errorf("OpenFileIn %s: %v", tc.name, err)
		}
		if err == nil {
			f.Close()
		}
	}
}
