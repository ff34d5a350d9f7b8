package recipe

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/unit"
	"github.com/google/go-containerregistry/pkg/name"
)

// Accepted values of enumerated fields.
var (
	Distributions = []string{"debian"}
	Releases      = []string{"bookworm", "trixie"}
	Architectures = []string{"amd64", "arm64"}
)

var (
	// imageNameRE: recipe and layer names end up in file names, OCI
	// annotations and on command lines.
	imageNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	// debianPackageRE follows Debian policy 5.6.1 (lower case, at least two
	// characters). Whether apt knows the package is for the builder to find out.
	debianPackageRE = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	componentRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9/-]*$`)
	kernelModuleRE  = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	// sysusersNameRE is what systemd-sysusers accepts as a portable name.
	sysusersNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,30}$`)
	ownerRE        = regexp.MustCompile(`^([a-z_][a-z0-9_-]{0,30}|[0-9]+)$`)
	goSumRE        = regexp.MustCompile(`^h1:[A-Za-z0-9+/]{43}=$`)
	goModuleRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._~/-]*$`)
	goTagRE        = regexp.MustCompile(`^[A-Za-z0-9_.]+$`)
	goVersionRE    = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-([0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*))?(\+incompatible)?$`)
	unitSuffixes   = []string{".service", ".socket", ".timer", ".target", ".mount", ".automount", ".path", ".slice", ".swap"}
)

// maxID is the largest UID/GID that is not reserved (65535 and 4294967295
// are "nobody"-like sentinels).
const maxID = 4294967294

func validateRecipe(r *Recipe, doc *document, p *problems) {
	requireName(p, doc, "name", r.Name)
	if r.Version == "" {
		p.addf(doc, "version", "required")
	} else if strings.ContainsFunc(r.Version, isSpaceOrControl) || strings.Contains(r.Version, "/") {
		p.addf(doc, "version", "%q must not contain spaces, control characters or slashes", r.Version)
	}

	b := r.Base
	switch {
	case b.Distribution == "":
		p.addf(doc, "base.distribution", "required (one of: %s)", strings.Join(Distributions, ", "))
	case !slices.Contains(Distributions, b.Distribution):
		p.addf(doc, "base.distribution", "%q is not supported (one of: %s)", b.Distribution, strings.Join(Distributions, ", "))
	}
	oneOf(p, doc, "base.release", b.Release, Releases)
	validateArchitectures(r, doc, p)
	validatePrune(r, doc, p)
	if u, err := url.Parse(b.Mirror); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.addf(doc, "base.mirror", "%q is not an http(s) URL", b.Mirror)
	}
	for i, c := range b.Components {
		if !componentRE.MatchString(c) {
			p.addf(doc, fmt.Sprintf("base.components[%d]", i), "%q is not an archive component name", c)
		}
	}
	checkPackages(p, doc, "base.packages", b.Packages)
	for i, l := range r.Layers {
		if l == "" {
			p.addf(doc, fmt.Sprintf("layers[%d]", i), "must not be empty")
		}
	}
	checkCmdline(p, doc, "kernel.cmdline", r.Kernel.Cmdline)
	for i, m := range r.Kernel.Modules {
		if !kernelModuleRE.MatchString(m) {
			p.addf(doc, fmt.Sprintf("kernel.modules[%d]", i), "%q is not a kernel module name", m)
		}
	}
	for i, o := range r.Outputs {
		field := fmt.Sprintf("outputs[%d]", i)
		if !slices.Contains(Outputs, o) {
			var names []string
			for _, k := range Outputs {
				names = append(names, string(k))
			}
			p.addf(doc, field, "%q is not supported (one of: %s)", o, strings.Join(names, ", "))
		}
		if slices.Index(r.Outputs, o) < i {
			p.addf(doc, field, "%q listed twice", o)
		}
	}
	for i, e := range r.Exclude {
		if e == "" {
			p.addf(doc, fmt.Sprintf("exclude[%d]", i), "must not be empty")
		}
	}
	if d := r.Disk.DataSizeMiB; d != nil && *d != 0 && (*d < MinDataSizeMiB || *d > MaxDataSizeMiB) {
		p.addf(doc, "disk.dataSizeMiB", "%d: want 0 (no data partition) or %d to %d", *d, MinDataSizeMiB, MaxDataSizeMiB)
	}
}

// validateLayers checks every resolved layer on its own, then what they must
// agree on: unique names, consistent users and groups.
func validateLayers(r *Recipe, p *problems) {
	units := map[string]unitCheck{}
	for _, l := range r.Resolved {
		validateLayer(r, l, r.src.layers[l], p, units)
	}

	type origin struct {
		doc   *document
		field string
		def   any
	}
	place := func(o origin) string {
		return fmt.Sprintf("%s:%d", o.doc.display, o.doc.line(o.field))
	}
	names := map[string]origin{}
	users := map[string]origin{}
	groups := map[string]origin{}
	for _, l := range r.Resolved {
		doc := r.src.layers[l]
		if l.Name != "" {
			if first, dup := names[l.Name]; dup {
				p.addf(doc, "name", "duplicate layer name %q, also used by %s", l.Name, place(first))
			} else {
				names[l.Name] = origin{doc, "name", nil}
			}
		}
		for i, u := range l.Users {
			o := origin{doc, fmt.Sprintf("users[%d]", i), u}
			if first, dup := users[u.Name]; !dup {
				users[u.Name] = o
			} else if !reflect.DeepEqual(first.def, o.def) {
				p.addf(doc, o.field, "user %q is defined differently at %s", u.Name, place(first))
			}
		}
		for i, g := range l.Groups {
			o := origin{doc, fmt.Sprintf("groups[%d]", i), g}
			if first, dup := groups[g.Name]; !dup {
				groups[g.Name] = o
			} else if !reflect.DeepEqual(first.def, o.def) {
				p.addf(doc, o.field, "group %q is defined differently at %s", g.Name, place(first))
			}
		}
	}
}

// unitCheck caches what is known about one unit file.
type unitCheck struct {
	err       string // why the unit cannot be used, if it cannot
	installed bool   // [Install] has WantedBy= or RequiredBy=
}

func validateLayer(r *Recipe, l *Layer, doc *document, p *problems, units map[string]unitCheck) {
	requireName(p, doc, "name", l.Name)
	checkPackages(p, doc, "packages", l.Packages)
	validateFiles(r, l, doc, p)
	validateUnits(r, l, doc, p, units)
	validateUsers(l, doc, p)
	validateOCI(l, doc, p)
	validateGo(l, doc, p)
	checkCmdline(p, doc, "cmdline", l.Cmdline)
	validatePersist(l, doc, p)
}

func validateFiles(r *Recipe, l *Layer, doc *document, p *problems) {
	dir := filepath.Dir(l.Path)
	for i, f := range l.Files {
		field := fmt.Sprintf("files[%d]", i)
		switch {
		case f.Source == "":
			p.addf(doc, field+".source", "required")
		case filepath.IsAbs(f.Source):
			p.addf(doc, field+".source", "%q must be relative to the layer file", f.Source)
		default:
			src := filepath.Join(dir, f.Source)
			info, err := r.checkSource(src)
			switch {
			case errors.Is(err, ErrOutsideTree):
				p.add(doc, field+".source", err, fmt.Sprintf("%q %v", f.Source, err))
			case err != nil:
				p.add(doc, field+".source", err, fmt.Sprintf("%s: %s", r.relPath(src), ioMsg(err)))
			case info.Mode()&fs.ModeSymlink != 0 && f.Mode != "":
				p.addf(doc, field+".mode", "%s is a symlink, copied as a link: it has no mode of its own", r.relPath(src))
			}
		}
		checkImagePath(p, doc, field+".destination", f.Destination)
		if f.Mode != "" {
			if m, err := strconv.ParseUint(f.Mode, 8, 32); err != nil || m > 0o7777 {
				p.addf(doc, field+".mode", "%q is not an octal mode between 0000 and 07777", f.Mode)
			}
		}
		checkOwner(p, doc, field+".owner", f.Owner)
		checkOwner(p, doc, field+".group", f.Group)
	}
}

// validateUnits checks each unit once per recipe (units caches them by
// path: layers share units).
func validateUnits(r *Recipe, l *Layer, doc *document, p *problems, units map[string]unitCheck) {
	for i, u := range l.Units {
		field := fmt.Sprintf("units[%d].name", i)
		if u.Name == "" {
			p.addf(doc, field, "required")
			continue
		}
		if filepath.Base(u.Name) != u.Name || !slices.ContainsFunc(unitSuffixes, func(s string) bool { return strings.HasSuffix(u.Name, s) && len(u.Name) > len(s) }) {
			p.addf(doc, field, "%q is not a unit file name (like foo.service)", u.Name)
			continue
		}
		abs := filepath.Join(r.UnitsPath(), u.Name)
		c, ok := units[abs]
		if !ok {
			c = checkUnit(abs, u.Name, r.UnitsDir)
			units[abs] = c
		}
		switch {
		case c.err != "":
			p.addf(doc, field, "%s", c.err)
		case u.Enable && !c.installed:
			p.addf(doc, fmt.Sprintf("units[%d].enable", i), "unit %q cannot be enabled: its [Install] section has no WantedBy= or RequiredBy=", u.Name)
		}
	}
}

func validateUsers(l *Layer, doc *document, p *problems) {
	for i, u := range l.Users {
		field := fmt.Sprintf("users[%d]", i)
		checkSysusersName(p, doc, field+".name", u.Name)
		checkID(p, doc, field+".uid", u.UID)
		if u.Group != "" {
			checkSysusersName(p, doc, field+".group", u.Group)
		}
		for j, g := range u.Groups {
			checkSysusersName(p, doc, fmt.Sprintf("%s.groups[%d]", field, j), g)
		}
		if u.Home != "" {
			checkImagePath(p, doc, field+".home", u.Home)
		}
		if u.Shell != "" {
			checkImagePath(p, doc, field+".shell", u.Shell)
		}
		if strings.ContainsFunc(u.Description, isControl) || strings.Contains(u.Description, `"`) {
			p.addf(doc, field+".description", "must not contain control characters or double quotes")
		}
	}
	for i, g := range l.Groups {
		field := fmt.Sprintf("groups[%d]", i)
		checkSysusersName(p, doc, field+".name", g.Name)
		checkID(p, doc, field+".gid", g.GID)
	}
}

func validateOCI(l *Layer, doc *document, p *problems) {
	for i, o := range l.OCI {
		field := fmt.Sprintf("oci[%d]", i)
		checkImageRef(p, doc, field+".image", o.Image)
		if len(o.Paths) == 0 {
			p.addf(doc, field+".paths", "required: map paths in the image to paths in the OS")
		}
		for _, from := range sortedKeys(o.Paths) {
			pf := fmt.Sprintf("%s.paths[%q]", field, from)
			if !path.IsAbs(from) || path.Clean(from) != from {
				p.addf(doc, pf, "image path %q must be absolute and clean", from)
			}
			checkImagePath(p, doc, pf, o.Paths[from])
		}
	}
}

func validateGo(l *Layer, doc *document, p *problems) {
	for i, g := range l.Go {
		field := fmt.Sprintf("go[%d]", i)
		switch {
		case g.Module == "":
			p.addf(doc, field+".module", "required")
		case !goModuleRE.MatchString(g.Module) || strings.Contains(g.Module, "..") || strings.HasSuffix(g.Module, "/"):
			p.addf(doc, field+".module", "%q is not a module path", g.Module)
		}
		switch {
		case g.Version == "":
			p.addf(doc, field+".version", "required")
		case !isGoModuleVersion(g.Version):
			p.addf(doc, field+".version", "%q is not an exact module version like v1.2.3 (no \"latest\", branches or queries)", g.Version)
		}
		if g.Sum != "" && !goSumRE.MatchString(g.Sum) {
			p.addf(doc, field+".sum", "%q is not a go.sum hash like h1:<base64 sha256>=", g.Sum)
		}
		if g.Package != "." && (!strings.HasPrefix(g.Package, "./") || path.Clean(g.Package) != g.Package[2:] || strings.HasPrefix(path.Clean(g.Package), "..")) {
			p.addf(doc, field+".package", "%q must be \".\" or a clean \"./\" path inside the module", g.Package)
		}
		checkImagePath(p, doc, field+".binary", g.Binary)
		for j, t := range g.Tags {
			if !goTagRE.MatchString(t) {
				p.addf(doc, fmt.Sprintf("%s.tags[%d]", field, j), "%q is not a build tag", t)
			}
		}
	}
}

func validatePersist(l *Layer, doc *document, p *problems) {
	for i, pp := range l.Persist {
		field := fmt.Sprintf("persist[%d]", i)
		checkImagePath(p, doc, field, pp)
		if pp == "/" || strings.ContainsAny(pp, ", \t") {
			p.addf(doc, field, "%q cannot be persisted (not /, no commas or spaces)", pp)
		}
	}
}

// checkUnit reads a unit file once for all layers naming it.
func checkUnit(abs, unitName, unitsDir string) unitCheck {
	// A unit is copied with its contents, so a link in the units directory
	// must not lead out of it.
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil && !within(dir, real) {
			return unitCheck{err: fmt.Sprintf("unit %q is a link to %s, outside %s", unitName, real, unitsDir)}
		}
	}
	data, _, err := readRegular(abs)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return unitCheck{err: fmt.Sprintf("unit %q not found in %s", unitName, unitsDir)}
		}
		return unitCheck{err: fmt.Sprintf("unit %q: %s", unitName, ioMsg(err))}
	}
	opts, err := unit.DeserializeOptions(bytes.NewReader(data))
	if err != nil {
		return unitCheck{err: fmt.Sprintf("unit %q does not parse: %v", unitName, err)}
	}
	var c unitCheck
	for _, o := range opts {
		if o.Section == "Install" && (o.Name == "WantedBy" || o.Name == "RequiredBy") && strings.TrimSpace(o.Value) != "" {
			c.installed = true
		}
	}
	return c
}

func requireName(p *problems, doc *document, field, v string) {
	switch {
	case v == "":
		p.addf(doc, field, "required")
	case !imageNameRE.MatchString(v):
		p.addf(doc, field, "%q may hold only letters, digits, '.', '_' and '-', starting with a letter or digit", v)
	}
}

func oneOf(p *problems, doc *document, field, v string, allowed []string) {
	if !slices.Contains(allowed, v) {
		p.addf(doc, field, "%q is not supported (one of: %s)", v, strings.Join(allowed, ", "))
	}
}

func checkPackages(p *problems, doc *document, field string, pkgs []string) {
	for i, pkg := range pkgs {
		if !debianPackageRE.MatchString(pkg) {
			p.addf(doc, fmt.Sprintf("%s[%d]", field, i), "%q is not a Debian package name", pkg)
		}
	}
}

// checkImagePath requires an absolute, clean path inside the built OS.
func checkImagePath(p *problems, doc *document, field, v string) {
	switch {
	case v == "":
		p.addf(doc, field, "required")
	case !path.IsAbs(v) || path.Clean(v) != v:
		p.addf(doc, field, "%q must be an absolute, clean path (like %q)", v, path.Clean("/"+v))
	}
}

func checkOwner(p *problems, doc *document, field, v string) {
	if v != "" && !ownerRE.MatchString(v) {
		p.addf(doc, field, "%q is not a user/group name or number", v)
	}
}

func checkSysusersName(p *problems, doc *document, field, v string) {
	switch {
	case v == "":
		p.addf(doc, field, "required")
	case !sysusersNameRE.MatchString(v):
		p.addf(doc, field, "%q is not a valid user or group name", v)
	}
}

func checkID(p *problems, doc *document, field string, id *int) {
	if id != nil && (*id < 0 || *id > maxID || *id == 65535) {
		p.addf(doc, field, "%d is not a usable ID", *id)
	}
}

func checkCmdline(p *problems, doc *document, field, v string) {
	if strings.ContainsFunc(v, isControl) {
		p.addf(doc, field, "must be one line without control characters")
	}
}

// checkImageRef requires an image reference that names a tag or a digest
// on an explicit registry: a tag is pinned by the recipe's lock file
// (`builder lock`), a digest pins the image in the recipe itself.
func checkImageRef(p *problems, doc *document, field, ref string) {
	if ref == "" {
		p.addf(doc, field, "required")
		return
	}
	if !strings.Contains(ref, "@") && !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
		p.addf(doc, field, "%q names no tag or digest: write host/repo:tag (pinned by the lock, see `builder lock`) or host/repo@sha256:...", ref)
		return
	}
	var err error
	if strings.Contains(ref, "@") {
		if !strings.Contains(ref, "@sha256:") {
			p.addf(doc, field, "%q: the digest must be sha256 (name@sha256:...)", ref)
			return
		}
		_, err = name.NewDigest(ref, name.StrictValidation)
	} else {
		_, err = name.NewTag(ref, name.StrictValidation)
	}
	if err != nil {
		p.add(doc, field, err, fmt.Sprintf("%q is not an image reference with a tag (host/repo:tag) or digest (host/repo@sha256:...): %v", ref, err))
	}
}

// isGoModuleVersion reports whether v is a canonical semantic version as the
// go command accepts it in module@version (including pseudo-versions).
func isGoModuleVersion(v string) bool {
	m := goVersionRE.FindStringSubmatch(v)
	if m == nil {
		return false
	}
	// Numeric pre-release identifiers must not have leading zeros (SemVer 2).
	for id := range strings.SplitSeq(m[5], ".") {
		if len(id) > 1 && id[0] == '0' && strings.Trim(id, "0123456789") == "" {
			return false
		}
	}
	return true
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func isSpaceOrControl(r rune) bool { return r == ' ' || isControl(r) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ErrOutsideTree is a files[].source that leads out of the recipe's tree.
var ErrOutsideTree = errors.New("outside the recipe's tree")

// checkSource checks that the file source src exists inside the recipe's
// tree and returns what it is (Lstat). The directories on the way are
// resolved, symlinks and all; the source itself is not followed, because
// the builder copies a symlink as a link (cp -a): its target names a path
// in the image, not a host file.
func (r *Recipe) checkSource(src string) (fs.FileInfo, error) {
	parent, err := filepath.EvalSymlinks(filepath.Dir(src))
	if err != nil {
		return nil, err
	}
	real := filepath.Join(parent, filepath.Base(src))
	if !within(r.src.tree, real) {
		return nil, fmt.Errorf("resolves to %s, %w %s", displayPath(real), ErrOutsideTree, displayPath(r.src.tree))
	}
	return os.Lstat(real)
}

// within reports whether path is dir or below it; both must be clean and
// absolute.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// validateArchitectures checks base.architecture or base.architectures
// (one of the two) and that arch names only those.
func validateArchitectures(r *Recipe, doc *document, p *problems) {
	b := r.Base
	archs := b.Architectures
	if len(archs) == 0 {
		oneOf(p, doc, "base.architecture", b.Architecture, Architectures)
		archs = []string{b.Architecture}
	} else if b.Architecture != "" && b.Architecture != archs[0] {
		// Load sets it to the first (render prints both): any other
		// value says two things.
		p.addf(doc, "base.architecture", "%q with base.architectures %v: set one of the two (base.architecture is the first of base.architectures)", b.Architecture, archs)
	}
	for i, a := range b.Architectures {
		field := fmt.Sprintf("base.architectures[%d]", i)
		oneOf(p, doc, field, a, Architectures)
		if slices.Index(b.Architectures, a) < i {
			p.addf(doc, field, "%q listed twice", a)
		}
	}
	for _, a := range slices.Sorted(maps.Keys(r.Arch)) {
		field := fmt.Sprintf("arch[%q]", a)
		if !slices.Contains(archs, a) {
			p.addf(doc, field, "%q is not an architecture this recipe builds (%s)", a, strings.Join(archs, ", "))
		}
		checkPackages(p, doc, field+".packages", r.Arch[a].Packages)
		checkCmdline(p, doc, field+".cmdline", r.Arch[a].Cmdline)
	}
}
