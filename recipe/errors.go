package recipe

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Error is one problem in a recipe or layer file, located as precisely as the
// loader can: file, line and the field path inside the document, e.g.
//
//	recipes/layers/libvirt.yaml:7: units[0].name: unit "foo.service" not found in ../units
//
// Load reports every problem it finds at once, joined with errors.Join and
// sorted by file and line; use errors.As to get at the first *Error.
type Error struct {
	// File as shown to the user: relative to the working directory when the
	// file is below it, absolute otherwise.
	File string
	// Line is 1-based; 0 when unknown.
	Line int
	// Field is the path inside the document, e.g. "layers[1]" or
	// "units[0].name"; empty when the problem concerns the whole file.
	Field string
	// Msg says what is wrong.
	Msg string
	// Err is the underlying cause, if any, for errors.Is/As.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// displayPath turns an absolute path into what error messages show: relative
// to the working directory when below it (short, and stable in tests).
func displayPath(abs string) string {
	wd, err := os.Getwd()
	if err != nil {
		return abs
	}
	rel, err := filepath.Rel(wd, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return abs
	}
	return rel
}

// problems collects every error found while loading, so that a user sees all
// of them in one run instead of fixing them one at a time.
type problems struct {
	errs []*Error
}

// addf records a problem at field of the document described by doc.
func (p *problems) addf(doc *document, field, format string, args ...any) {
	p.add(doc, field, nil, fmt.Sprintf(format, args...))
}

func (p *problems) add(doc *document, field string, cause error, msg string) {
	p.addAt(doc, doc.line(field), field, cause, msg)
}

// addAt records a problem at an explicit line (e.g. an unknown key's own
// line, which has no field path of its own).
func (p *problems) addAt(doc *document, line int, field string, cause error, msg string) {
	p.errs = append(p.errs, &Error{
		File:  doc.display,
		Line:  line,
		Field: field,
		Msg:   msg,
		Err:   cause,
	})
}

// err returns the collected problems sorted by file, line and field, or nil.
func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	sorted := slices.Clone(p.errs)
	slices.SortStableFunc(sorted, func(a, b *Error) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Field, b.Field),
		)
	})
	sorted = slices.CompactFunc(sorted, func(a, b *Error) bool { return a.Error() == b.Error() })
	if len(sorted) == 1 {
		return sorted[0]
	}
	errs := make([]error, len(sorted))
	for i, e := range sorted {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// DisplayPath is a path as errors show it: relative to the working
// directory when below it, else as given.
func DisplayPath(abs string) string { return displayPath(abs) }
