package recipe

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// LockVersion is the lock file format this package reads and writes.
const LockVersion = 1

// Lock is a recipe's lock file: the digest of every source of its layers,
// written by `builder lock` and read by `builder build`. Like go.sum it is
// generated, committed next to the recipe, and reviewed as a diff.
type Lock struct {
	// Version of the format; LockVersion.
	Version int `json:"version"`
	// Sources, sorted by layer, kind and ref; one entry per source.
	Sources []LockedSource `json:"sources"`

	// Path is the file the lock was read from (or is to be written to).
	Path string `json:"-"`
	doc  *document
}

// LockedSource pins one source of one layer.
type LockedSource struct {
	Layer string     `json:"layer"`
	Kind  SourceKind `json:"kind"`
	// Ref is the source as the recipe names it, without a digest:
	// "ghcr.io/x/y:v1" or "github.com/x/y@v1.2.3".
	Ref string `json:"ref"`
	// Digest: the image's manifest or index digest (sha256:...), or the
	// module's go.sum hash (h1:...).
	Digest string `json:"digest"`
}

// LockPath is the lock file of the recipe at recipePath: the same name
// with the extension .lock (recipes/hypervisor.yaml -> recipes/hypervisor.lock).
func LockPath(recipePath string) string {
	return strings.TrimSuffix(recipePath, filepath.Ext(recipePath)) + ".lock"
}

var ociDigestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// LoadLock reads and checks the lock file at path. A missing file is an
// error wrapping fs.ErrNotExist: a recipe need not have a lock.
func LoadLock(path string) (*Lock, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	data, _, err := readRegular(abs)
	if err != nil {
		return nil, &Error{File: displayPath(abs), Msg: "cannot read lock file: " + ioMsg(err), Err: err}
	}
	return ParseLock(abs, data)
}

// ParseLock decodes and checks a lock file's contents (path names it in
// errors). Every problem is reported, located by line.
func ParseLock(path string, data []byte) (*Lock, error) {
	var p problems
	l := &Lock{}
	if len(data) > MaxFileSize {
		return nil, &Error{File: displayPath(path), Msg: fmt.Sprintf("larger than %d bytes, the limit for recipe files", MaxFileSize)}
	}
	doc := decodeDocument(path, data, l, &p)
	if doc == nil {
		return nil, p.err()
	}
	l.Path, l.doc = path, doc
	if l.Version != LockVersion {
		p.addf(doc, "version", "%d is not a lock format this builder reads (want %d)", l.Version, LockVersion)
	}
	seen := map[LockedSource]string{}
	for i, s := range l.Sources {
		field := fmt.Sprintf("sources[%d]", i)
		if s.Layer == "" {
			p.addf(doc, field+".layer", "required")
		} else if !imageNameRE.MatchString(s.Layer) {
			p.addf(doc, field+".layer", "%q is not a layer name", s.Layer)
		}
		switch s.Kind {
		case SourceOCI:
			if strings.Contains(s.Ref, "@") {
				p.addf(doc, field+".ref", "%q: an image ref names no digest (that is the digest field)", s.Ref)
			} else if _, err := name.NewTag(s.Ref, name.StrictValidation); err != nil {
				p.add(doc, field+".ref", err, fmt.Sprintf("%q is not an image reference host/repo:tag: %v", s.Ref, err))
			}
			if !ociDigestRE.MatchString(s.Digest) {
				p.addf(doc, field+".digest", "%q is not an image digest (sha256: and 64 lower-case hex digits)", s.Digest)
			}
		case SourceGo:
			mod, version, ok := strings.Cut(s.Ref, "@")
			if !ok || !goModuleRE.MatchString(mod) || strings.Contains(mod, "..") || !isGoModuleVersion(version) {
				p.addf(doc, field+".ref", "%q is not module@version with an exact version", s.Ref)
			}
			if !goSumRE.MatchString(s.Digest) {
				p.addf(doc, field+".digest", "%q is not a go.sum hash like h1:<base64 sha256>=", s.Digest)
			}
		default:
			p.addf(doc, field+".kind", "%q is not a source kind (oci or go)", s.Kind)
		}
		key := LockedSource{Layer: s.Layer, Kind: s.Kind, Ref: s.Ref}
		if first, dup := seen[key]; dup {
			p.addf(doc, field, "%s %s of layer %s is locked twice (also %s)", s.Kind, s.Ref, s.Layer, first)
		} else {
			seen[key] = fmt.Sprintf("%s:%d", doc.display, doc.line(field))
		}
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	return l, nil
}

// Find returns the entry locking s, if any.
func (l *Lock) Find(s Source) (LockedSource, bool) {
	if l == nil {
		return LockedSource{}, false
	}
	for _, e := range l.Sources {
		if e.Layer == s.Layer && e.Kind == s.Kind && e.Ref == s.Ref {
			return e, true
		}
	}
	return LockedSource{}, false
}

// Errorf is an *Error located at the lock's i-th entry.
func (l *Lock) Errorf(i int, format string, args ...any) error {
	field := fmt.Sprintf("sources[%d]", i)
	e := &Error{File: displayPath(l.Path), Field: field, Msg: fmt.Sprintf(format, args...)}
	if l.doc != nil {
		e.File, e.Line = l.doc.display, l.doc.line(field)
	}
	return e
}

// Stale returns the indexes of entries that lock no source of the recipe:
// the layer, kind or ref is gone (a version or tag moved on). Entries of
// excluded layers are not stale: the layers are still the recipe's.
func (l *Lock) Stale(r *Recipe) []int {
	if l == nil {
		return nil
	}
	srcs := r.Sources()
	var stale []int
	for i, e := range l.Sources {
		if !slices.ContainsFunc(srcs, func(s Source) bool { return s.Layer == e.Layer && s.Kind == e.Kind && s.Ref == e.Ref }) {
			stale = append(stale, i)
		}
	}
	return stale
}

// Marshal writes the lock in its one canonical form: a comment, then the
// entries sorted by layer, kind and ref, every value JSON-quoted (valid
// YAML). The same lock gives the same bytes.
func (l *Lock) Marshal() []byte {
	srcs := SortedLockedSources(l.Sources)
	var b strings.Builder
	b.WriteString("# Written by `builder lock`; do not edit. The digest of every source of the\n")
	b.WriteString("# recipe's layers; `builder build --locked` builds exactly these.\n")
	fmt.Fprintf(&b, "version: %d\n", LockVersion)
	if len(srcs) == 0 {
		b.WriteString("sources: []\n")
		return []byte(b.String())
	}
	b.WriteString("sources:\n")
	q := func(s string) string { j, _ := json.Marshal(s); return string(j) }
	for _, s := range srcs {
		fmt.Fprintf(&b, "  - layer: %s\n    kind: %s\n    ref: %s\n    digest: %s\n", q(s.Layer), q(string(s.Kind)), q(s.Ref), q(s.Digest))
	}
	return []byte(b.String())
}

// Write writes the lock to l.Path in its canonical form, atomically: a
// reader sees the old lock or the new one.
func (l *Lock) Write() error {
	tmp, err := os.CreateTemp(filepath.Dir(l.Path), "."+filepath.Base(l.Path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write lock: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(l.Marshal()); err != nil {
		tmp.Close()
		return fmt.Errorf("write lock %s: %w", l.Path, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("write lock %s: %w", l.Path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write lock %s: %w", l.Path, err)
	}
	if err := os.Rename(tmp.Name(), l.Path); err != nil {
		return fmt.Errorf("write lock: %w", err)
	}
	return nil
}

// FindEntry returns the entry for the same layer, kind and ref as e.
func (l *Lock) FindEntry(e LockedSource) (LockedSource, bool) {
	return l.Find(Source{Layer: e.Layer, Kind: e.Kind, Ref: e.Ref})
}

// SortedLockedSources sorts entries as lock files list them.
func SortedLockedSources(srcs []LockedSource) []LockedSource {
	srcs = slices.Clone(srcs)
	slices.SortFunc(srcs, func(a, b LockedSource) int {
		return cmp.Or(cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Ref, b.Ref))
	})
	return srcs
}
