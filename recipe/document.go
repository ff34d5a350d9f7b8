package recipe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// document is one decoded YAML file and the line of every field in it.
//
// sigs.k8s.io/yaml (the decoder) goes through JSON and its errors carry no
// line, so the same bytes are also parsed into a yaml.v3 node tree. Walking
// that tree against the Go type finds unknown fields and wrong types with
// their exact place, and records "field path -> line" for later validation
// messages.
type document struct {
	path    string // absolute
	display string // as shown in errors
	lines   map[string]int
}

// line returns the line of field, or of its nearest ancestor present in the
// file (a missing required field is reported where its parent is).
func (d *document) line(field string) int {
	for {
		if l, ok := d.lines[field]; ok {
			return l
		}
		if field == "" {
			return 0
		}
		field = parentField(field)
	}
}

// parentField strips the last component off a field path:
// "units[0].name" -> "units[0]" -> "units" -> "".
func parentField(field string) string {
	if strings.HasSuffix(field, "]") {
		if i := strings.LastIndexByte(field, '['); i >= 0 {
			return field[:i]
		}
	}
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		return field[:i]
	}
	return ""
}

func joinField(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// loadOnly are fields of the types that Load fills in; a file must not set them.
var loadOnly = map[reflect.Type]map[string]bool{
	reflect.TypeFor[Recipe](): {"resolved": true},
	reflect.TypeFor[Layer]():  {"path": true},
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): `)

// decodeDocument strictly decodes data (the contents of the file at abs) into
// into, a pointer to Recipe or Layer. Problems go to p; the returned document
// is nil when decoding failed.
func decodeDocument(abs string, data []byte, into any, p *problems) *document {
	doc := &document{path: abs, display: displayPath(abs), lines: map[string]int{}}

	var root yamlv3.Node
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		p.addAt(doc, syntaxLine(err), "", err, "invalid YAML: "+syntaxMsg(err))
		return nil
	}
	var next yamlv3.Node
	if err := dec.Decode(&next); err == nil {
		p.addAt(doc, next.Line, "", nil, "more than one YAML document; a file holds exactly one")
		return nil
	} else if !errors.Is(err, io.EOF) {
		p.addAt(doc, syntaxLine(err), "", err, "invalid YAML: "+syntaxMsg(err))
		return nil
	}

	if root.Kind == yamlv3.DocumentNode && len(root.Content) == 1 {
		content := root.Content[0]
		doc.lines[""] = content.Line
		w := walker{doc: doc, p: p}
		before := len(p.errs)
		w.walk(content, reflect.TypeOf(into).Elem(), "")
		if len(p.errs) > before {
			return nil
		}
	}

	// The walk accepts only what the strict decoder accepts; this is the
	// decoding proper, and a safety net should the two ever disagree.
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		p.addAt(doc, 0, "", err, err.Error())
		return nil
	}
	return doc
}

// parserErrorPrefixes start the messages of yaml.v3's parser (as opposed to
// its scanner), which reports 0-based lines.
var parserErrorPrefixes = []string{
	"did not find expected",
	"found duplicate %",
	"found incompatible YAML document",
	"found undefined tag handle",
}

func syntaxLine(err error) int {
	m := yamlLineRE.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	msg := syntaxMsg(err)
	for _, prefix := range parserErrorPrefixes {
		if strings.HasPrefix(msg, prefix) {
			return n + 1
		}
	}
	return n
}

func syntaxMsg(err error) string {
	msg := yamlLineRE.ReplaceAllString(err.Error(), "")
	return strings.TrimPrefix(msg, "yaml: ")
}

// walker checks a node tree against a Go type the way the strict decoder
// will read it, but knowing where each node is.
type walker struct {
	doc *document
	p   *problems
}

func (w *walker) errorf(line int, field, format string, args ...any) {
	w.p.addAt(w.doc, line, field, nil, fmt.Sprintf(format, args...))
}

func (w *walker) walk(n *yamlv3.Node, t reflect.Type, field string) {
	if n.Kind == yamlv3.AliasNode {
		w.errorf(n.Line, field, "YAML aliases are not supported")
		return
	}
	if n.Kind == yamlv3.ScalarNode && n.Tag == "!!null" {
		return // null is the zero value
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		w.walkStruct(n, t, field)
	case reflect.Slice:
		if n.Kind != yamlv3.SequenceNode {
			w.errorf(n.Line, field, "expected a list, got %s", describe(n))
			return
		}
		for i, item := range n.Content {
			child := fmt.Sprintf("%s[%d]", field, i)
			w.doc.lines[child] = item.Line
			w.walk(item, t.Elem(), child)
		}
	case reflect.Map:
		w.walkMap(n, t, field)
	case reflect.String:
		if n.Kind != yamlv3.ScalarNode {
			w.errorf(n.Line, field, "expected a string, got %s", describe(n))
		} else if !isText(n) {
			w.errorf(n.Line, field, "expected a string, got %s; quote it: %q", describe(n), n.Value)
		}
	case reflect.Bool:
		switch {
		case n.Kind != yamlv3.ScalarNode:
			w.errorf(n.Line, field, "expected true or false, got %s", describe(n))
		case n.Tag != "!!bool":
			w.errorf(n.Line, field, "expected true or false, got %q", n.Value)
		}
	case reflect.Int:
		var v int
		if n.Kind != yamlv3.ScalarNode || n.Tag != "!!int" || yamlv2.Unmarshal([]byte(n.Value), &v) != nil {
			w.errorf(n.Line, field, "expected an integer, got %s", describe(n))
		}
	default:
		w.errorf(n.Line, field, "internal error: cannot check field of type %s", t)
	}
}

func (w *walker) walkStruct(n *yamlv3.Node, t reflect.Type, field string) {
	if n.Kind != yamlv3.MappingNode {
		w.errorf(n.Line, field, "expected a mapping, got %s", describe(n))
		return
	}
	fields := jsonFields(t)
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !w.checkKey(k, field, seen) {
			continue
		}
		ft, ok := fields[k.Value]
		if !ok {
			msg := fmt.Sprintf("unknown field %q", k.Value)
			if s := suggest(k.Value, fields); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			w.errorf(k.Line, field, "%s", msg)
			continue
		}
		child := joinField(field, k.Value)
		w.doc.lines[child] = k.Line
		w.walk(v, ft, child)
	}
}

func (w *walker) walkMap(n *yamlv3.Node, t reflect.Type, field string) {
	if n.Kind != yamlv3.MappingNode {
		w.errorf(n.Line, field, "expected a mapping, got %s", describe(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !w.checkKey(k, field, seen) {
			continue
		}
		child := fmt.Sprintf("%s[%q]", field, k.Value)
		w.doc.lines[child] = k.Line
		w.walk(v, t.Elem(), child)
	}
}

// checkKey reports keys that are not plain strings or appear twice.
func (w *walker) checkKey(k *yamlv3.Node, field string, seen map[string]int) bool {
	switch {
	case k.Kind == yamlv3.ScalarNode && k.Tag == "!!merge":
		w.errorf(k.Line, field, "YAML merge keys (<<) are not supported")
		return false
	case k.Kind != yamlv3.ScalarNode || !isText(k):
		w.errorf(k.Line, field, "keys must be strings, got %s", describe(k))
		return false
	}
	if first, dup := seen[k.Value]; dup {
		w.errorf(k.Line, field, "duplicate key %q (first at line %d)", k.Value, first)
		return false
	}
	seen[k.Value] = k.Line
	return true
}

// isText says whether a scalar is read as a string by both YAML parsers
// involved. sigs.k8s.io/yaml decodes with YAML 1.1 rules and then turns
// numbers and booleans into strings when the target is a string, so an
// unquoted 0644 would silently become "420" and `on` would become "true".
func isText(n *yamlv3.Node) bool {
	if n.Style&(yamlv3.DoubleQuotedStyle|yamlv3.SingleQuotedStyle|yamlv3.LiteralStyle|yamlv3.FoldedStyle) != 0 {
		return true
	}
	if n.Tag != "!!str" && n.Tag != "!!timestamp" {
		return false
	}
	if n.Style&yamlv3.TaggedStyle != 0 {
		return true // explicit !!str
	}
	var v any
	if err := yamlv2.Unmarshal([]byte(n.Value), &v); err != nil {
		return true
	}
	switch v.(type) {
	case nil, bool, int, int64, uint64, float64:
		return false
	}
	return true
}

// describe names a node's kind for error messages.
func describe(n *yamlv3.Node) string {
	switch n.Kind {
	case yamlv3.MappingNode:
		return "a mapping"
	case yamlv3.SequenceNode:
		return "a list"
	case yamlv3.AliasNode:
		return "an alias"
	case yamlv3.ScalarNode:
		if isText(n) {
			return fmt.Sprintf("the string %q", n.Value)
		}
		var v any
		_ = yamlv2.Unmarshal([]byte(n.Value), &v)
		switch v.(type) {
		case bool:
			return fmt.Sprintf("%s (read as a boolean)", n.Value)
		case int, int64, uint64, float64:
			return fmt.Sprintf("%s (read as a number)", n.Value)
		case nil:
			return "null"
		}
		return fmt.Sprintf("%s (read as %s)", n.Value, n.Tag)
	}
	return "nothing"
}

// jsonFields maps the JSON names of t's fields to their types, leaving out
// fields that only Load sets.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || name == "" || loadOnly[t][name] {
			continue
		}
		fields[name] = f.Type
	}
	return fields
}

// suggest returns the known field closest to an unknown one, if close enough
// to be a typo.
func suggest(unknown string, fields map[string]reflect.Type) string {
	best, bestDist := "", 3
	for name := range fields {
		d := editDistance(strings.ToLower(unknown), strings.ToLower(name))
		if d < bestDist || (d == bestDist && best != "" && name < best) {
			best, bestDist = name, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
