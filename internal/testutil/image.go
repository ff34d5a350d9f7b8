package testutil

import (
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// LinuxImage returns img as a linux/arch image (its config's OS and
// architecture, what a pull for a platform selects by), with labels as
// its config's labels unless labels is nil.
func LinuxImage(t testing.TB, img v1.Image, arch string, labels map[string]string) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	if labels != nil {
		cf.Config.Labels = labels
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
