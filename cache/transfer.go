package cache

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/ironcore-dev/os-builder/internal/boundedfile"
)

// What moves an entry between stores (package cache/remote): the sealed
// record of a local entry, a seal that came from elsewhere checked as
// strictly as the store's own, and a fill that takes such a seal and
// refuses to make the entry visible unless what was written matches it.

// Sealed returns the directory and the seal of the complete entry for key
// (Lookup's check first: a damaged entry is an error, not a seal).
func (s *Store) Sealed(key string) (string, *Meta, error) {
	if err := s.check(key, false); err != nil {
		return "", nil, err
	}
	p := s.Path(key)
	m, err := readMeta(p)
	if err != nil {
		return "", nil, err
	}
	return p, m, nil
}

// ParseSeal parses a meta file that is not the store's own (a remote
// entry's), bounded in size: every file a clean relative path listed once,
// the key a plain key and the one its inputs make.
func ParseSeal(b []byte) (*Meta, error) {
	if len(b) > maxMetaSize {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", metaFile, len(b), maxMetaSize)
	}
	m, err := parseMeta(b)
	if err != nil {
		return nil, err
	}
	if err := ValidKey(m.Key); err != nil {
		return nil, fmt.Errorf("%s: %w", metaFile, err)
	}
	if k := m.Inputs.Key(); k != m.Key {
		return nil, fmt.Errorf("%s: key %s is not the key of its inputs (%s)", metaFile, m.Key, k)
	}
	return m, nil
}

// Import fills the entry the seal m describes: write puts its files into
// the fresh directory it is given, and must check each regular file's
// bytes against its sealed sha256 as it writes them (the seal takes that
// sha256 for a file of the sealed size and mtime instead of hashing it
// again). The entry is sealed anew (this disk's identities) and becomes
// visible only when the new seal has exactly m's files (paths, types,
// modes, sizes, mtimes, sha256, link targets).
func (s *Store) Import(ctx context.Context, m *Meta, write func(dir string) error) (string, error) {
	known := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		if f.Kind() == "file" {
			known[f.Path] = f
		}
	}
	return s.fill(ctx, m.Step, m.Inputs, write, func(got []File) error {
		return sameFiles(m.Files, got)
	}, known)
}

// sameFiles compares two seals, identities left out.
func sameFiles(want, got []File) error {
	w := make(map[string]File, len(want))
	for _, f := range want {
		w[f.Path] = f
	}
	if len(got) != len(want) {
		return fmt.Errorf("cache import: %d files written, the seal lists %d", len(got), len(want))
	}
	for _, g := range got {
		f, ok := w[g.Path]
		switch {
		case !ok:
			return fmt.Errorf("cache import: %s: not in the seal", g.Path)
		case f.Mode != g.Mode || f.Link != g.Link:
			return fmt.Errorf("cache import: %s: mode %v -> %q, sealed %v -> %q", g.Path, g.Mode, g.Link, f.Mode, f.Link)
		case g.Mode.IsRegular() && (f.Size != g.Size || f.MTime != g.MTime || f.SHA256 != g.SHA256):
			return fmt.Errorf("cache import: %s: %d bytes, mtime %d, sha256 %s; sealed %d, %d, %s", g.Path, g.Size, g.MTime, g.SHA256, f.Size, f.MTime, f.SHA256)
		}
	}
	return nil
}

// SealPath is a sealed file's path under an entry directory: File.Path
// is slash-separated.
func SealPath(dir string, f File) string {
	return filepath.Join(dir, filepath.FromSlash(f.Path))
}

// Kind is what a sealed file is: "file", "dir", "symlink", or "" for
// anything else (no entry holds one; an import refuses it).
func (f File) Kind() string {
	switch {
	case f.Mode.IsRegular():
		return "file"
	case f.Mode.IsDir():
		return "dir"
	case f.Mode&fs.ModeSymlink != 0:
		return "symlink"
	}
	return ""
}

// ScopeKeys returns the keys of the steps a scope (a recipe) last ran
// with, as Remember recorded them: the entries its last build used.
func (s *Store) ScopeKeys(scope string) ([]string, error) {
	des, err := os.ReadDir(s.lastDir())
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	prefix := sanitize(scope) + "--"
	var keys []string
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), ".json")
		if !ok || !strings.HasPrefix(name, prefix) {
			continue
		}
		b, err := boundedfile.Read(filepath.Join(s.lastDir(), de.Name()), maxLastSize)
		if err != nil {
			continue
		}
		var in Inputs
		if json.Unmarshal(b, &in) != nil {
			continue
		}
		keys = append(keys, in.Key())
	}
	sort.Strings(keys)
	return slices.Compact(keys), nil
}
