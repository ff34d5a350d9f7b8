package recipe

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Defaults applied by Load to fields a recipe leaves empty.
const (
	DefaultRelease      = "bookworm"
	DefaultArchitecture = "amd64"
	DefaultMirror       = "http://deb.debian.org/debian"
	DefaultComponent    = "main"
	DefaultUnitsDir     = "../units"
	DefaultGoPackage    = "."
)

// MaxFileSize bounds recipe, layer and unit files: they are read whole,
// and a recipe naming a huge file must fail, not exhaust memory.
const MaxFileSize = 1 << 20

// sources records the parsed documents behind a loaded recipe.
type sources struct {
	recipe *document
	layers map[*Layer]*document
	// tree is the recipe's tree with symlinks resolved: files[].source
	// must stay inside it (see checkSource).
	tree string
	// all is every resolved layer before exclusions: a lock covers the
	// sources of excluded layers too.
	all []*Layer
}

// Load reads the recipe at path, resolves its layers and their includes,
// applies defaults, validates everything and drops the layers the recipe
// excludes. All problems found are returned together (see Error).
//
// Layers are resolved depth-first: a layer's includes come before the layer,
// and each layer file is applied once, at its first position.
func Load(path string) (*Recipe, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", path, err)
	}
	data, _, err := readRegular(abs)
	if err != nil {
		return nil, &Error{File: displayPath(abs), Msg: "cannot read recipe: " + ioMsg(err), Err: err}
	}
	tree, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return nil, &Error{File: displayPath(abs), Msg: "cannot resolve the recipe's directory: " + ioMsg(err), Err: err}
	}

	var p problems
	r := &Recipe{}
	doc := decodeDocument(abs, data, r, &p)
	if doc == nil {
		return nil, p.err()
	}
	r.Path = abs
	r.Resolved = nil
	r.src = &sources{recipe: doc, layers: map[*Layer]*document{}, tree: tree}
	applyRecipeDefaults(r)
	validateRecipe(r, doc, &p)
	if len(r.Base.Architectures) > 0 && r.Base.Architecture == "" {
		r.Base.Architecture = r.Base.Architectures[0]
	}

	res := resolver{r: r, p: &p, seen: map[fileID]bool{}}
	for i, layerPath := range r.Layers {
		if layerPath != "" {
			res.resolve(relativeTo(filepath.Dir(abs), layerPath), doc, fmt.Sprintf("layers[%d]", i), nil)
		}
	}
	validateLayers(r, &p)

	// Exclusions named in the recipe are checked here, where their lines are
	// known; ExcludeLayers does the same for names given on the command line.
	exclude := r.Exclude
	r.Exclude = nil
	for i, name := range exclude {
		if name != "" && r.layerIndex(name) < 0 {
			p.addf(doc, fmt.Sprintf("exclude[%d]", i), "no layer named %q (layers: %s)", name, strings.Join(r.LayerNames(), ", "))
		}
	}
	if err := p.err(); err != nil {
		return nil, err
	}
	r.src.all = slices.Clone(r.Resolved)
	if err := r.ExcludeLayers(exclude...); err != nil {
		return nil, err
	}
	return r, nil
}

func applyRecipeDefaults(r *Recipe) {
	if r.Base.Release == "" {
		r.Base.Release = DefaultRelease
	}
	if r.Base.Architecture == "" && len(r.Base.Architectures) == 0 {
		r.Base.Architecture = DefaultArchitecture
	}
	if r.Base.Mirror == "" {
		r.Base.Mirror = DefaultMirror
	}
	if len(r.Base.Components) == 0 {
		r.Base.Components = []string{DefaultComponent}
	}
	if r.UnitsDir == "" {
		r.UnitsDir = DefaultUnitsDir
	}
	if len(r.Outputs) == 0 {
		r.Outputs = []Output{DefaultOutput}
	}
}

func applyLayerDefaults(l *Layer) {
	for i := range l.Go {
		if l.Go[i].Package == "" {
			l.Go[i].Package = DefaultGoPackage
		}
	}
}

// resolver walks layer files and their includes depth-first.
type resolver struct {
	r    *Recipe
	p    *problems
	seen map[fileID]bool // layer files already visited
}

// includer is a layer file whose includes are being resolved.
type includer struct {
	id   fileID
	path string // as reached, for messages
}

// resolve loads the layer file at abs, named by field of the document from,
// after its includes. stack holds the files whose includes are being
// resolved, to detect cycles. Files are told apart by identity, not by
// path: through symlinked directories one file has endless paths.
func (res *resolver) resolve(abs string, from *document, field string, stack []includer) {
	// A layer is read whole, like a file source: it must be in the tree.
	if real, err := filepath.EvalSymlinks(abs); err == nil && !within(res.r.src.tree, real) {
		res.p.add(from, field, ErrOutsideTree, fmt.Sprintf("layer file %s resolves to %s, %v %s", res.r.relPath(abs), displayPath(real), ErrOutsideTree, displayPath(res.r.src.tree)))
		return
	}
	data, id, err := readRegular(abs)
	if err != nil {
		res.p.add(from, field, err, fmt.Sprintf("layer file %s: %s", res.r.relPath(abs), ioMsg(err)))
		return
	}
	if i := slices.IndexFunc(stack, func(inc includer) bool { return inc.id == id }); i >= 0 {
		var chain []string
		for _, inc := range stack[i:] {
			chain = append(chain, res.r.relPath(inc.path))
		}
		chain = append(chain, res.r.relPath(abs))
		res.p.addf(from, field, "include cycle: %s", strings.Join(chain, " -> "))
		return
	}
	if res.seen[id] {
		return // applied once, at its first position
	}
	res.seen[id] = true

	layer := &Layer{}
	doc := decodeDocument(abs, data, layer, res.p)
	if doc == nil {
		return
	}
	layer.Path = abs
	applyLayerDefaults(layer)

	stack = append(stack[:len(stack):len(stack)], includer{id, abs})
	for j, inc := range layer.Include {
		field := fmt.Sprintf("include[%d]", j)
		if inc == "" {
			res.p.addf(doc, field, "must not be empty")
			continue
		}
		res.resolve(relativeTo(filepath.Dir(abs), inc), doc, field, stack)
	}
	res.r.Resolved = append(res.r.Resolved, layer)
	res.r.src.layers[layer] = doc
}

// ExcludeLayers removes the named layers from Resolved and records them in
// Exclude, for the build manifest. Naming a layer that is not part of the
// recipe is an error (and then nothing is removed); naming one that is
// already excluded is not.
func (r *Recipe) ExcludeLayers(names ...string) error {
	var errs []error
	for _, name := range names {
		if r.layerIndex(name) < 0 && !slices.Contains(r.Exclude, name) {
			errs = append(errs, fmt.Errorf("exclude %q: no layer of that name (layers: %s)", name, strings.Join(r.LayerNames(), ", ")))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	for _, name := range names {
		if i := r.layerIndex(name); i >= 0 {
			r.Resolved = slices.Delete(r.Resolved, i, i+1)
			r.Exclude = append(r.Exclude, name)
		}
	}
	return nil
}

// LayerNames returns the names of the resolved layers in apply order.
func (r *Recipe) LayerNames() []string {
	names := make([]string, len(r.Resolved))
	for i, l := range r.Resolved {
		names[i] = l.Name
	}
	return names
}

func (r *Recipe) layerIndex(name string) int {
	return slices.IndexFunc(r.Resolved, func(l *Layer) bool { return l.Name == name })
}

// UnitsPath is the absolute units directory.
func (r *Recipe) UnitsPath() string {
	return relativeTo(filepath.Dir(r.Path), r.UnitsDir)
}

// relPath shows abs relative to the recipe's directory, for messages and
// rendering that must not depend on where the repository is checked out.
func (r *Recipe) relPath(abs string) string {
	rel, err := filepath.Rel(filepath.Dir(r.Path), abs)
	if err != nil {
		return abs
	}
	return filepath.ToSlash(rel)
}

// relativeTo resolves p against dir unless p is absolute.
func relativeTo(dir, p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

// ioMsg is an I/O error without the path, which the message already shows.
func ioMsg(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// fileID identifies a file whatever path reaches it.
type fileID struct{ dev, ino uint64 }

// readRegular reads a file of at most MaxFileSize bytes and returns its
// identity, refusing devices, FIFOs and directories (a recipe naming
// /dev/zero must fail, not hang). It opens without blocking and checks the
// opened file, so what is checked is what is read.
func readRegular(path string) ([]byte, fileID, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fileID{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fileID{}, err
	}
	if !info.Mode().IsRegular() {
		return nil, fileID{}, &fs.PathError{Op: "read", Path: path, Err: errors.New("not a regular file")}
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, fileID{}, &fs.PathError{Op: "stat", Path: path, Err: errors.New("no device and inode number")}
	}
	// Read one byte more than allowed: the size may change after Stat.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fileID{}, err
	}
	if len(data) > MaxFileSize {
		return nil, fileID{}, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("larger than %d bytes, the limit for recipe files", MaxFileSize)}
	}
	return data, fileID{dev: uint64(st.Dev), ino: st.Ino}, nil
}
