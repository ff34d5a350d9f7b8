package artifacts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArtifactDirWriteFile: a writer that writes at offsets gets a new
// file and its sum recorded; one that fails leaves no file, and an
// existing file is never written over.
func TestArtifactDirWriteFile(t *testing.T) {
	d := newArtifactDir(t.TempDir())
	err := d.writeFile("ok.img", func(f *os.File) (string, error) {
		_, err := f.WriteAt([]byte("x"), 4096)
		return "sum", err
	})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(d.dir, "ok.img")); err != nil || fi.Size() != 4097 || d.sums["ok.img"] != "sum" {
		t.Errorf("file %v (%v), sum %q", fi, err, d.sums["ok.img"])
	}
	err = d.writeFile("bad.img", func(f *os.File) (string, error) {
		f.WriteAt([]byte("x"), 0)
		return "", errors.New("writer failed")
	})
	if err == nil || !strings.Contains(err.Error(), "writer failed") {
		t.Errorf("err = %v", err)
	}
	if _, err := os.Stat(filepath.Join(d.dir, "bad.img")); !os.IsNotExist(err) {
		t.Errorf("a failed writer left its file: %v", err)
	}
	if err := d.writeFile("ok.img", func(*os.File) (string, error) { return "", nil }); err == nil {
		t.Error("wrote over an existing file")
	}
}
