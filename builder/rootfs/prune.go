package rootfs

import (
	"path"
	"slices"
	"strings"

	"github.com/ironcore-dev/os-builder/recipe"
)

// dpkgOptions are the dpkg filter options the bootstrap installs r with:
// dpkgFilter alone when r prunes nothing (the same bytes as ever), else
// every path-exclude before every path-include. dpkg lets the last
// matching option decide; with the includes last, a path is left out when
// an exclude matches it and no include does, which is also what
// pruneExtractHook and the builder's own checks apply.
func dpkgOptions(r *recipe.Recipe) []string {
	ex, in := r.PruneExclude(), r.PruneInclude()
	if len(ex) == 0 && len(in) == 0 {
		return dpkgFilter
	}
	var excl, incl []string
	for _, o := range dpkgFilter {
		if strings.HasPrefix(o, "path-include=") {
			incl = append(incl, o)
		} else {
			excl = append(excl, o)
		}
	}
	for _, p := range ex {
		excl = append(excl, "path-exclude="+p)
	}
	for _, p := range in {
		incl = append(incl, "path-include="+p)
	}
	return append(excl, incl...)
}

// patternDirs are the directories a find for patterns starts from: each
// pattern's literal part up to its last / before the first glob
// character, so / is searched only for a pattern that globs there.
func patternDirs(patterns []string) []string {
	var dirs []string
	for _, p := range patterns {
		lit := p
		if i := strings.IndexAny(p, "*?["); i >= 0 {
			lit = p[:i]
		}
		d := path.Dir(lit + "x") // "/usr/include/" -> /usr/include, "/usr/lib/firmware/iwl" -> /usr/lib/firmware
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// findPaths is a find(1) expression that is true for a path matching one
// of patterns (or, with under, lying under one): find's -path matches as
// dpkg's filter does (fnmatch without FNM_PATHNAME, * matches / too). The
// patterns are recipe.Prune's (validated: no quotes, $, spaces or
// backslashes), so double quotes keep the shell from globbing them.
func findPaths(patterns []string, under bool) string {
	var alt []string
	for _, p := range patterns {
		alt = append(alt, `-path "`+p+`"`)
		if under {
			alt = append(alt, `-path "`+strings.TrimSuffix(p, "/")+`/*"`)
		}
	}
	return `\( ` + strings.Join(alt, " -o ") + ` \)`
}

// pruneExtractHook deletes, from the essential packages the extract phase
// unpacked unfiltered (see dpkgFilterHook), what r's prune patterns leave
// out: files an exclude matches and no include (dpkgFilter's included
// paths, or r's) does, then the directories an exclude matches that are
// left empty. "" when r excludes nothing.
func pruneExtractHook(r *recipe.Recipe) string {
	ex := r.PruneExclude()
	if len(ex) == 0 {
		return ""
	}
	var in []string
	for _, o := range dpkgOptions(r) {
		if p, ok := strings.CutPrefix(o, "path-include="); ok {
			in = append(in, p)
		}
	}
	keep := ""
	if len(in) > 0 {
		keep = ` ! ` + findPaths(in, false)
	}
	return `chroot "$1" sh -c 'for d in ` + strings.Join(patternDirs(ex), " ") + `; do [ -d "$d" ] || continue; ` +
		`find "$d" -xdev -depth ` + findPaths(ex, false) + keep + ` \( ! -type d -o -empty \) -delete || exit 1; done'`
}

// pruneRemoveHook deletes what r's prune.remove patterns match, with
// everything under a matched directory, once every package is configured
// (their scripts generate what these name). "" when there is nothing to
// remove.
func pruneRemoveHook(r *recipe.Recipe) string {
	rm := r.PruneRemove()
	if len(rm) == 0 {
		return ""
	}
	return `chroot "$1" sh -c 'for d in ` + strings.Join(patternDirs(rm), " ") + `; do [ -d "$d" ] || continue; ` +
		`find "$d" -xdev -mindepth 1 -depth ` + findPaths(rm, true) + ` -delete || exit 1; done'`
}
