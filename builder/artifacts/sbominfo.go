package artifacts

import (
	"debug/buildinfo"
	"fmt"
	"sort"
	"strings"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// initPath is where the initrd's init sits, as the manifest names it.
const initPath = "/init"

// GoPrograms reads the build information of every Go binary the build
// compiled (the recipe's go programs and the init), for manifest.json and
// from there the SBOM. It reads the binaries themselves, so what is listed
// is what was linked, whatever the cache held.
func GoPrograms(bins []step.Binary, initBin string) ([]osimage.GoProgram, error) {
	var out []osimage.GoProgram
	add := func(src, dest string) error {
		p, err := goProgramOf(src, dest)
		if err != nil {
			return err
		}
		out = append(out, p)
		return nil
	}
	if initBin != "" {
		if err := add(initBin, initPath); err != nil {
			return nil, err
		}
	}
	for _, b := range bins {
		ref, ok := strings.CutPrefix(b.Step, "go:")
		if !ok {
			continue
		}
		if err := add(b.Src, b.Dest); err != nil {
			return nil, err
		}
		// The step builds inside the module's own tree, with no VCS
		// information, so the binary records its main module as
		// "(devel)": the version is the one the recipe pinned.
		p := &out[len(out)-1]
		if mod, version, _ := strings.Cut(ref, "@"); p.Main.Path == mod && (p.Main.Version == "" || p.Main.Version == "(devel)") {
			p.Main.Version = version
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func goProgramOf(src, dest string) (osimage.GoProgram, error) {
	// Inside the step's directory, like every step output the writers read.
	f, err := fsroot.OpenPath(src)
	if err != nil {
		return osimage.GoProgram{}, fmt.Errorf("go program %s: %w", dest, err)
	}
	defer f.Close()
	bi, err := buildinfo.Read(f)
	if err != nil {
		return osimage.GoProgram{}, fmt.Errorf("go program %s: build info: %w", dest, err)
	}
	p := osimage.GoProgram{
		Path:      dest,
		GoVersion: bi.GoVersion,
		Main:      osimage.GoModule{Path: bi.Main.Path, Version: bi.Main.Version, Sum: bi.Main.Sum},
	}
	for _, d := range bi.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace // what was linked
		}
		p.Deps = append(p.Deps, osimage.GoModule{Path: m.Path, Version: m.Version, Sum: m.Sum})
	}
	sort.Slice(p.Deps, func(i, j int) bool { return p.Deps[i].Path < p.Deps[j].Path })
	return p, nil
}

// OCISources lists the images the recipe takes files from.
func OCISources(r *recipe.Recipe) []osimage.OCISource {
	var out []osimage.OCISource
	for _, l := range r.Resolved {
		for _, o := range l.OCI {
			s := osimage.OCISource{Image: o.Image}
			for from := range o.Paths {
				s.Paths = append(s.Paths, from)
			}
			sort.Strings(s.Paths)
			out = append(out, s)
		}
	}
	return out
}
