package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/publish"
)

func TestArchRef(t *testing.T) {
	for _, tt := range []struct{ ref, want string }{
		{"oci:out/oci:0.1.0", "oci:out/oci:0.1.0-arm64"},
		{"oci:out/oci", ""},
		{"registry.example:5000/os/test:0.1.0", "registry.example:5000/os/test:0.1.0-arm64"},
		{"registry.example/os/test@sha256:" + strings.Repeat("0", 64), ""},
	} {
		got, err := archRef(tt.ref, "arm64", publish.Options{})
		if err != nil || got != tt.want {
			t.Errorf("archRef(%s) = %q, %v; want %q", tt.ref, got, err, tt.want)
		}
	}
}

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
	if got, err := outputDirs(one); err != nil || !slices.Equal(got, []string{one}) {
		t.Errorf("one architecture: %v, %v", got, err)
	}
	want := []string{filepath.Join(multi, "amd64"), filepath.Join(multi, "arm64")}
	if got, err := outputDirs(multi); err != nil || !slices.Equal(got, want) {
		t.Errorf("several: %v, %v; want %v", got, err, want)
	}
	if _, err := outputDirs(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no manifest.json") {
		t.Errorf("an empty directory: %v", err)
	}
}
