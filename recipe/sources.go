package recipe

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// SourceKind says what a source is: an OCI image or a Go module.
type SourceKind string

// Source kinds, as written in lock files and build manifests.
const (
	SourceOCI SourceKind = "oci"
	SourceGo  SourceKind = "go"
)

// Source is one thing a layer fetches from outside: an OCI image (oci[])
// or a Go module (go[]). Ref names it as the recipe does, without the
// digest: "ghcr.io/x/y:v1" or "github.com/x/y@v1.2.3". Digest is what the
// recipe itself pins (an image's "@sha256:...", a module's sum), "" when
// the recipe leaves the pinning to the lock.
type Source struct {
	Layer  string
	Kind   SourceKind
	Ref    string
	Digest string
	// Excluded: the layer is left out of this build.
	Excluded bool

	layer *Layer
	index int
	doc   *document
}

// Sources lists the sources of every layer of the recipe, excluded ones
// included (they are still the recipe's: a lock keeps their entries), in
// apply order.
func (r *Recipe) Sources() []Source {
	var out []Source
	for _, l := range r.allLayers() {
		excluded := !slices.Contains(r.Resolved, l)
		var doc *document
		if r.src != nil {
			doc = r.src.layers[l]
		}
		for i, o := range l.OCI {
			ref, digest, _ := strings.Cut(o.Image, "@")
			s := Source{Layer: l.Name, Kind: SourceOCI, Ref: ref, Digest: digest, Excluded: excluded, layer: l, index: i, doc: doc}
			out = append(out, s.unpinned())
		}
		for i, g := range l.Go {
			s := Source{Layer: l.Name, Kind: SourceGo, Ref: g.Module + "@" + g.Version, Digest: g.Sum, Excluded: excluded, layer: l, index: i, doc: doc}
			out = append(out, s.unpinned())
		}
	}
	return out
}

// allLayers is every layer of the recipe in apply order, excluded or not.
func (r *Recipe) allLayers() []*Layer {
	if r.src != nil && r.src.all != nil {
		return r.src.all
	}
	return r.Resolved
}

// field is where the source is written in its layer file.
func (s Source) field() string {
	if s.Kind == SourceOCI {
		return fmt.Sprintf("oci[%d].image", s.index)
	}
	return fmt.Sprintf("go[%d]", s.index)
}

// Errorf is an *Error located at the source in its layer file.
func (s Source) Errorf(format string, args ...any) error {
	e := &Error{Field: s.field(), Msg: fmt.Sprintf(format, args...)}
	switch {
	case s.doc != nil:
		e.File, e.Line = s.doc.display, s.doc.line(e.Field)
	case s.layer != nil:
		e.File = s.layer.Path
	}
	return e
}

// String names the source for messages: "layer poollet: go github.com/x@v1".
func (s Source) String() string {
	return fmt.Sprintf("layer %s: %s %s", s.Layer, s.Kind, s.Ref)
}

// unpinned reports the file's own digest, not one Pinned set.
func (s Source) unpinned() Source {
	if d, ok := s.layer.filePins[s.field()]; ok {
		s.Digest = d
	}
	return s
}

// SourcePin is a digest for one source.
type SourcePin struct {
	Source Source
	Digest string
}

// Pinned returns a copy of r in which each pinned source uses its digest:
// an image becomes Ref@digest, a module's sum the digest. The recipe's own
// digest, if any, is replaced, so callers pin only what the recipe leaves
// open or agrees with. r is left as it was; the copy's Sources go on
// listing the digests the files give.
func (r *Recipe) Pinned(pins []SourcePin) *Recipe {
	c := *r
	clones := map[*Layer]*Layer{}
	clone := func(l *Layer) *Layer {
		if n, ok := clones[l]; ok {
			return n
		}
		n := *l
		n.OCI, n.Go, n.filePins = slices.Clone(l.OCI), slices.Clone(l.Go), maps.Clone(l.filePins)
		clones[l] = &n
		return &n
	}
	for _, p := range pins {
		s := p.Source
		if s.layer == nil {
			continue
		}
		l := clone(s.layer)
		if l.filePins == nil {
			l.filePins = map[string]string{}
		}
		if _, ok := l.filePins[s.field()]; !ok {
			l.filePins[s.field()] = s.unpinned().Digest
		}
		if s.Kind == SourceOCI {
			l.OCI[s.index].Image = s.Ref + "@" + p.Digest
		} else {
			l.Go[s.index].Sum = p.Digest
		}
	}
	swap := func(ls []*Layer) []*Layer {
		out := slices.Clone(ls)
		for i, l := range out {
			if n, ok := clones[l]; ok {
				out[i] = n
			}
		}
		return out
	}
	c.Resolved = swap(r.Resolved)
	if r.src != nil {
		src := *r.src
		src.all = swap(r.src.all)
		src.layers = maps.Clone(r.src.layers)
		for l, n := range clones {
			src.layers[n] = r.src.layers[l]
		}
		c.src = &src
	}
	return &c
}

// Where is the source's place as "file:line", for messages.
func (s Source) Where() string {
	e := s.Errorf("").(*Error)
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	return e.File
}
