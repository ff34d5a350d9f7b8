package publish

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// OutputDirs are the build outputs in dir: dir itself when it holds a
// manifest.json, else its ARCH subdirectories that do (what `builder
// build` writes for a recipe of several architectures), in recipe order.
func OutputDirs(dir string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, osimage.ManifestFile)); err == nil {
		return []string{dir}, nil
	}
	var dirs []string
	for _, a := range recipe.Architectures {
		sub := filepath.Join(dir, a)
		if _, err := os.Stat(filepath.Join(sub, osimage.ManifestFile)); err == nil {
			dirs = append(dirs, sub)
		}
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("%s: no %s, and no ARCH/%s of a build of several architectures", dir, osimage.ManifestFile, osimage.ManifestFile)
	}
	return dirs, nil
}

// expandOutputs is OutputDirs of each of dirs, in order.
func expandOutputs(dirs []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		ds, err := OutputDirs(d)
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}
