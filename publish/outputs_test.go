package publish_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/publish"
)

func TestOutputDirs(t *testing.T) {
	one := t.TempDir()
	multi := t.TempDir()
	for _, d := range []string{one, filepath.Join(multi, "arm64"), filepath.Join(multi, "amd64")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, osimage.ManifestFile), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := publish.OutputDirs(one); err != nil || !slices.Equal(got, []string{one}) {
		t.Errorf("one architecture: %v, %v", got, err)
	}
	want := []string{filepath.Join(multi, "amd64"), filepath.Join(multi, "arm64")}
	if got, err := publish.OutputDirs(multi); err != nil || !slices.Equal(got, want) {
		t.Errorf("several: %v, %v; want %v", got, err, want)
	}
	if _, err := publish.OutputDirs(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no manifest.json") {
		t.Errorf("an empty directory: %v", err)
	}
}
