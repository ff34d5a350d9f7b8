package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
)

// An entry's symlinks must stay inside it: whatever reads a step's output
// by path would otherwise read the file a link names wherever it is, and
// an entry pulled from a registry could put the builder's signing key into
// a signed artifact. A link is refused when its target is absolute or when
// following it, as the kernel would through the entry's own links, climbs
// above the entry. Checked on the seal, so a local fill, a lookup and a
// remote entry's seal all refuse it.

const (
	// maxLinkDepth bounds a chain of links, as Linux's MAXSYMLINKS (40)
	// does; a longer one (or a loop) is refused.
	maxLinkDepth = 40
	// maxLinkTarget is Linux's bound on a target (PATH_MAX, its NUL
	// included).
	maxLinkTarget = 4095
)

// ErrLinkEscapes marks a symlink whose target leaves its entry.
var ErrLinkEscapes = errors.New("symlink leaves the entry")

// A seal's paths as a tree of nodes, so that a step of a resolution
// (a name, "..") costs the name, not the path: a seal of many links
// through one deep one costs the sum of their targets.
type linkNode struct {
	parent   int // the top is its own parent
	children map[string]int
	link     *File // a symlink's file
	// Where the link lands once resolved: a node and the names below it
	// the seal does not hold (taken as directories, so a ".." after one
	// still counts: stricter than the kernel, which stops there).
	done bool
	to   place
	busy bool // being resolved: a loop
}

// place is a node and a count of names below it that the seal lacks.
type place struct{ node, missing int }

type linkTree []linkNode

// checkLinks checks every symlink of a seal (see above).
func checkLinks(files []File) error {
	t := linkTree{{parent: 0}}
	for i := range files {
		if files[i].Mode&fs.ModeSymlink != 0 {
			t[t.add(files[i].Path)].link = &files[i]
		}
	}
	for i := range t {
		if l := t[i].link; l != nil {
			if _, err := t.follow(i, 0); err != nil {
				return fmt.Errorf("%s -> %q: %w", l.Path, l.Link, err)
			}
		}
	}
	return nil
}

// add makes the nodes of the clean relative path p and returns its own.
func (t *linkTree) add(p string) int {
	n := 0
	for _, c := range strings.Split(p, "/") {
		next, ok := (*t)[n].children[c]
		if !ok {
			next = len(*t)
			*t = append(*t, linkNode{parent: n})
			if (*t)[n].children == nil {
				(*t)[n].children = map[string]int{}
			}
			(*t)[n].children[c] = next
		}
		n = next
	}
	return n
}

// follow resolves the link at node n, depth links deep, once.
func (t linkTree) follow(n, depth int) (place, error) {
	l := &t[n]
	if l.done {
		return l.to, nil
	}
	if depth++; depth > maxLinkDepth || l.busy {
		return place{}, fmt.Errorf("more than %d links deep (a loop?)", maxLinkDepth)
	}
	l.busy = true
	to, err := t.resolve(place{node: l.parent}, l.link.Link, depth)
	t[n].busy = false
	if err != nil {
		return place{}, err
	}
	t[n].done, t[n].to = true, to
	return to, nil
}

// resolve resolves target from the directory at, through the seal's links.
func (t linkTree) resolve(at place, target string, depth int) (place, error) {
	switch {
	case target == "":
		return place{}, errors.New("empty target")
	case len(target) > maxLinkTarget:
		return place{}, fmt.Errorf("target of %d bytes, more than %d", len(target), maxLinkTarget)
	case target[0] == '/':
		return place{}, fmt.Errorf("%w: absolute target", ErrLinkEscapes)
	}
	for _, c := range strings.Split(target, "/") {
		switch {
		case c == "" || c == ".":
		case c == ".." && at.missing > 0:
			at.missing--
		case c == "..":
			if at.node == 0 {
				return place{}, fmt.Errorf("%w: climbs above it", ErrLinkEscapes)
			}
			at.node = t[at.node].parent
		case at.missing > 0:
			at.missing++
		default:
			next, ok := t[at.node].children[c]
			switch {
			case !ok:
				at.missing++
			case t[next].link != nil:
				to, err := t.follow(next, depth)
				if err != nil {
					return place{}, fmt.Errorf("through %s: %w", t[next].link.Path, err)
				}
				at = to
			default:
				at.node = next
			}
		}
	}
	return at, nil
}
