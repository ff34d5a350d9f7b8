package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
)

// An entry's symlinks must stay inside it: whatever reads a step's output
// by path (the artifact writers, the initrd) would otherwise read the file
// a link names wherever it is, and an entry pulled from a registry could
// put the builder's signing key into a signed artifact. A link is refused
// when its target is absolute or when following it, as the kernel would
// through the entry's own links, climbs above the entry. Checked on the
// seal, so a local fill, a lookup and a remote entry's seal all refuse it.

// maxLinkHops bounds the links followed resolving one link, as Linux's
// MAXSYMLINKS (40) does; a chain longer than that is refused.
const maxLinkHops = 40

// ErrLinkEscapes marks a symlink whose target leaves its entry.
var ErrLinkEscapes = errors.New("symlink leaves the entry")

// checkLinks checks every symlink of a seal (see above).
func checkLinks(files []File) error {
	tree := make(map[string]File, len(files))
	for _, f := range files {
		tree[f.Path] = f
	}
	for _, f := range files {
		if f.Mode&fs.ModeSymlink == 0 {
			continue
		}
		hops := 0
		if _, err := resolveLink(tree, path.Dir(f.Path), f.Link, &hops); err != nil {
			return fmt.Errorf("%s -> %q: %w", f.Path, f.Link, err)
		}
	}
	return nil
}

// resolveLink resolves target from the directory dir (both relative to the
// entry, "." its top) through the entry's links and returns where it
// lands. A component the seal does not hold is taken as a directory, so a
// ".." after it still counts (stricter than the kernel, which stops there).
func resolveLink(tree map[string]File, dir, target string, hops *int) (string, error) {
	if target == "" {
		return "", errors.New("empty target")
	}
	if path.IsAbs(target) {
		return "", fmt.Errorf("%w: absolute target", ErrLinkEscapes)
	}
	cur := dir
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if cur == "." {
				return "", fmt.Errorf("%w: climbs above it", ErrLinkEscapes)
			}
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, c)
		f, ok := tree[next]
		if !ok || f.Mode&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if *hops++; *hops > maxLinkHops {
			return "", fmt.Errorf("more than %d links deep (a loop?)", maxLinkHops)
		}
		to, err := resolveLink(tree, cur, f.Link, hops)
		if err != nil {
			return "", fmt.Errorf("through %s: %w", next, err)
		}
		cur = to
	}
	return cur, nil
}
