package builder

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ironcore-dev/os-builder/osimage"
)

// ErrOutputNotOurs is why an output directory is refused: a build replaces
// the directory and deletes what it held, so it may only replace a missing
// or empty directory or an earlier output of this builder.
var ErrOutputNotOurs = errors.New("not an earlier output of this builder")

// OutputDirError is an output directory a build refuses to replace.
type OutputDirError struct {
	Dir    string
	Reason string
}

func (e *OutputDirError) Error() string {
	return fmt.Sprintf("output %s: %s; refusing to replace it (that would delete what it holds): name a new or empty directory", e.Dir, e.Reason)
}

func (e *OutputDirError) Unwrap() error { return ErrOutputNotOurs }

// maxManifestSize bounds manifest.json; a real one is tens of KiB.
const maxManifestSize = 16 << 20

// CheckOutputDir returns an *OutputDirError unless dir is missing, an empty
// directory or an earlier output of this builder: a directory whose
// manifest.json is a build manifest listing every other file in it. Files
// the manifest does not list would be lost, so they make it refuse too.
func CheckOutputDir(dir string) error {
	info, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("output %s: %w", dir, err)
	}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		return &OutputDirError{Dir: dir, Reason: "is a symlink, " + ErrOutputNotOurs.Error()}
	case !info.IsDir():
		return &OutputDirError{Dir: dir, Reason: "is not a directory"}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("output %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return nil
	}
	listed, err := readOutputManifest(filepath.Join(dir, osimage.ManifestFile))
	if err != nil {
		return &OutputDirError{Dir: dir, Reason: fmt.Sprintf("holds %s and %v, so it is %v", someNames(entries, nil), err, ErrOutputNotOurs)}
	}
	listed = append(listed, osimage.ManifestFile)
	if extra := someNames(entries, listed); extra != "" {
		return &OutputDirError{Dir: dir, Reason: "is an earlier output but also holds " + extra + ", which its manifest does not list"}
	}
	return nil
}

// readOutputManifest reads the manifest of an earlier output and returns
// the file names it lists. It fails unless the file is a build manifest
// naming its artifacts as plain file names.
func readOutputManifest(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s", osimage.ManifestFile)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", osimage.ManifestFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return nil, err
	}
	return parseOutputManifest(data)
}

// parseOutputManifest checks that data is a build manifest (see
// readOutputManifest) and returns the artifact file names.
func parseOutputManifest(data []byte) ([]string, error) {
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("%s larger than %d bytes", osimage.ManifestFile, maxManifestSize)
	}
	var m osimage.BuildManifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s that is not a build manifest: %w", osimage.ManifestFile, err)
	}
	if m.Recipe == "" || len(m.Artifacts) == 0 {
		return nil, fmt.Errorf("%s that is not a build manifest (no recipe or artifacts)", osimage.ManifestFile)
	}
	var names []string
	for _, a := range m.Artifacts {
		if a.Path == "" || a.Path == "." || a.Path == ".." || a.Path == osimage.ManifestFile || strings.ContainsAny(a.Path, "/\x00") {
			return nil, fmt.Errorf("%s that is not a build manifest (artifact path %q)", osimage.ManifestFile, a.Path)
		}
		names = append(names, a.Path)
	}
	return names, nil
}

// someNames names the entries not in except, at most three of them, for
// messages; "" when there are none.
func someNames(entries []fs.DirEntry, except []string) string {
	var names []string
	for _, e := range entries {
		if !slices.Contains(except, e.Name()) {
			names = append(names, fmt.Sprintf("%q", e.Name()))
		}
	}
	switch {
	case len(names) == 0:
		return ""
	case len(names) > 3:
		return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
	}
	return strings.Join(names, ", ")
}
