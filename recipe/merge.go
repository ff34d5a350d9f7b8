package recipe

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The accessors below merge the resolved layers (after exclusions) into what
// the builder installs. docs/recipes.md states the same rules for users.

// ResolvedFile is a file or directory tree to copy into the image.
type ResolvedFile struct {
	// Source is the absolute path in the repository.
	Source string `json:"source"`
	// Destination is the absolute path in the image.
	Destination string `json:"destination"`
	// Mode, Owner and Group as written in the layer (empty: default).
	Mode  string `json:"mode,omitempty"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// Layer is the name of the layer the file comes from.
	Layer string `json:"layer"`
}

// Perm returns the file's mode bits and whether the layer set any; without
// them the source's mode is kept, as git keeps it.
func (f ResolvedFile) Perm() (fs.FileMode, bool) {
	if f.Mode == "" {
		return 0, false
	}
	m, err := strconv.ParseUint(f.Mode, 8, 32)
	if err != nil {
		return 0, false // Load rejects such modes
	}
	// Go keeps setuid/setgid/sticky outside the permission bits.
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode, true
}

// ResolvedUnit is a systemd unit to install.
type ResolvedUnit struct {
	Name string `json:"name"`
	// Path is the absolute path of the unit file.
	Path string `json:"path"`
	// Enable is true when any layer enables the unit.
	Enable bool `json:"enable,omitempty"`
	// Layer is the first layer naming the unit.
	Layer string `json:"layer"`
}

// Packages returns the base packages, the architecture's (arch) and every
// layer's, sorted and without duplicates.
func (r *Recipe) Packages() []string {
	pkgs := slices.Concat(r.Base.Packages, r.Arch[r.Base.Architecture].Packages)
	for _, l := range r.Resolved {
		pkgs = append(pkgs, l.Packages...)
	}
	slices.Sort(pkgs)
	return slices.Compact(pkgs)
}

// Files returns the files to copy, in apply order. When several layers write
// the same destination, only the last one is kept (at its own position), so
// copying the list in order yields the same tree as applying every layer.
func (r *Recipe) Files() []ResolvedFile {
	var files []ResolvedFile
	for _, l := range r.Resolved {
		dir := filepath.Dir(l.Path)
		for _, f := range l.Files {
			files = slices.DeleteFunc(files, func(prev ResolvedFile) bool { return prev.Destination == f.Destination })
			files = append(files, ResolvedFile{
				Source:      relativeTo(dir, f.Source),
				Destination: f.Destination,
				Mode:        f.Mode,
				Owner:       f.Owner,
				Group:       f.Group,
				Layer:       l.Name,
			})
		}
	}
	return files
}

// Units returns the units to install, sorted by name; a unit is enabled when
// any layer enables it.
func (r *Recipe) Units() []ResolvedUnit {
	var units []ResolvedUnit
	for _, l := range r.Resolved {
		for _, u := range l.Units {
			i := slices.IndexFunc(units, func(prev ResolvedUnit) bool { return prev.Name == u.Name })
			if i < 0 {
				units = append(units, ResolvedUnit{
					Name:  u.Name,
					Path:  filepath.Join(r.UnitsPath(), u.Name),
					Layer: l.Name,
				})
				i = len(units) - 1
			}
			units[i].Enable = units[i].Enable || u.Enable
		}
	}
	slices.SortFunc(units, func(a, b ResolvedUnit) int { return strings.Compare(a.Name, b.Name) })
	return units
}

// Users returns the system users in order of first definition. Load has
// made sure that repeated definitions are identical.
func (r *Recipe) Users() []User {
	var users []User
	for _, l := range r.Resolved {
		for _, u := range l.Users {
			if !slices.ContainsFunc(users, func(prev User) bool { return prev.Name == u.Name }) {
				users = append(users, u)
			}
		}
	}
	return users
}

// Groups returns the system groups in order of first definition.
func (r *Recipe) Groups() []Group {
	var groups []Group
	for _, l := range r.Resolved {
		for _, g := range l.Groups {
			if !slices.ContainsFunc(groups, func(prev Group) bool { return prev.Name == g.Name }) {
				groups = append(groups, g)
			}
		}
	}
	return groups
}

// Cmdline is the recipe's kernel.cmdline, the architecture's (arch), then
// each layer's cmdline, in apply order, joined by single spaces.
func (r *Recipe) Cmdline() string {
	words := strings.Fields(r.Kernel.Cmdline)
	words = append(words, strings.Fields(r.Arch[r.Base.Architecture].Cmdline)...)
	for _, l := range r.Resolved {
		words = append(words, strings.Fields(l.Cmdline)...)
	}
	return strings.Join(words, " ")
}

// DataSizeMiB is the effective disk.dataSizeMiB: as set, else
// DefaultDataSizeMiB when the recipe persists paths, else 0.
func (r *Recipe) DataSizeMiB() int {
	if r.Disk.DataSizeMiB != nil {
		return *r.Disk.DataSizeMiB
	}
	if len(r.Persist()) > 0 {
		return DefaultDataSizeMiB
	}
	return 0
}

// Persist is every layer's persisted paths, deduplicated and sorted.
func (r *Recipe) Persist() []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range r.Resolved {
		for _, p := range l.Persist {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// PackageOrigin tells where pkg is first asked for: the recipe's
// base.packages, else the first layer in apply order listing it. file is as
// Error.File shows it; ("", 0) when no file names pkg.
func (r *Recipe) PackageOrigin(pkg string) (file string, line int) {
	doc, field := r.packageField(pkg)
	if doc == nil {
		return "", 0
	}
	return doc.display, doc.line(field)
}

// PackageError turns a problem the builder found with a package (e.g. apt's
// "Unable to locate package") into an *Error located where the package is
// asked for. Without a known origin it is located at the recipe file.
func (r *Recipe) PackageError(pkg, msg string) error {
	doc, field := r.packageField(pkg)
	if doc == nil {
		return &Error{File: displayPath(r.Path), Msg: fmt.Sprintf("package %q: %s", pkg, msg)}
	}
	return &Error{File: doc.display, Line: doc.line(field), Field: field, Msg: fmt.Sprintf("package %q: %s", pkg, msg)}
}

func (r *Recipe) packageField(pkg string) (*document, string) {
	if r.src == nil {
		return nil, ""
	}
	if i := slices.Index(r.Base.Packages, pkg); i >= 0 {
		return r.src.recipe, fmt.Sprintf("base.packages[%d]", i)
	}
	for _, l := range r.Resolved {
		if i := slices.Index(l.Packages, pkg); i >= 0 {
			return r.src.layers[l], fmt.Sprintf("packages[%d]", i)
		}
	}
	return nil, ""
}

// Architectures are the architectures the recipe is built for:
// base.architectures, else base.architecture.
func (r *Recipe) Architectures() []string {
	if len(r.Base.Architectures) > 0 {
		return slices.Clone(r.Base.Architectures)
	}
	return []string{r.Base.Architecture}
}

// ForArchitecture is the recipe as built for arch, one of Architectures:
// a copy whose base.architecture is arch and whose base.architectures is
// empty. The layers are shared, not copied.
func (r *Recipe) ForArchitecture(arch string) (*Recipe, error) {
	if !slices.Contains(r.Architectures(), arch) {
		return nil, fmt.Errorf("recipe %s is not built for %s (architectures: %s)", r.Name, arch, strings.Join(r.Architectures(), ", "))
	}
	c := *r
	c.Base.Architecture = arch
	c.Base.Architectures = nil
	c.Resolved = slices.Clone(r.Resolved)
	c.Exclude = slices.Clone(r.Exclude)
	return &c, nil
}
