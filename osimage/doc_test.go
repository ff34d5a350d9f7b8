package osimage

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestImageFormatDocListsEveryLayer: docs/image-format.md's layer table has
// one row per artifact kind, in layer order, with its media type and boot
// method (initrd-noroot was missing), then the build manifest.
func TestImageFormatDocListsEveryLayer(t *testing.T) {
	b, err := os.ReadFile("../docs/image-format.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Layers\n")
	if start < 0 {
		t.Fatal("docs/image-format.md has no ## Layers section")
	}
	doc = doc[start:]
	doc = doc[:strings.Index(doc[1:], "\n## ")+1]
	var rows [][]string
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "|") && len(rows) > 0 {
			break // the layer table ends; later tables describe other things
		}
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| artifact") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.Trim(strings.TrimSpace(c), "`"))
		}
		rows = append(rows, cells)
	}
	var want [][]string
	for _, k := range kindOrder {
		want = append(want, []string{string(k), kindMediaTypes[k], string(kindBoot[k])})
	}
	want = append(want, []string{"build manifest", MediaTypeManifestJSON, "(none)"})
	if len(rows) != len(want) {
		t.Fatalf("layer table has %d rows, want %d (one per kind, then the build manifest): %q", len(rows), len(want), rows)
	}
	for i, w := range want {
		r := rows[i]
		if len(r) != 4 || r[0] != w[0] || r[2] != w[1] || r[3] != w[2] {
			t.Errorf("row %d: %q, want kind %s, media type %s, boot %s", i+1, r, w[0], w[1], w[2])
		}
	}
}

// docSection returns the text of the "## title" section.
func docSection(t *testing.T, doc, title string) string {
	t.Helper()
	start := strings.Index(doc, "\n## "+title+"\n")
	if start < 0 {
		t.Fatalf("docs/image-format.md has no ## %s section", title)
	}
	s := doc[start+1:]
	if end := strings.Index(s[1:], "\n## "); end >= 0 {
		s = s[:end+1]
	}
	return s
}

// TestImageFormatDocV2Strings: the V2 table of docs/image-format.md is
// osimage's table (v2.go): per kind its artifactType, config media type
// and, per role in order, the media types and how many layers.
func TestImageFormatDocV2Strings(t *testing.T) {
	b, err := os.ReadFile("../docs/image-format.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := docSection(t, string(b), "IronCore Image V2")
	var rows []string
	for _, line := range strings.Split(sec, "\n") {
		if strings.HasPrefix(line, "| ") && !strings.HasPrefix(line, "| kind") {
			rows = append(rows, line)
		}
		if len(rows) > 0 && !strings.HasPrefix(line, "|") {
			break
		}
	}
	specs := v2Specs
	if len(rows) != len(specs) {
		t.Fatalf("V2 table has %d rows, want %d: %q", len(rows), len(specs), rows)
	}
	for i, spec := range specs {
		var layers []string
		for _, l := range spec.Layers {
			count := fmt.Sprintf("%d..%d", l.Min, l.Max)
			switch {
			case l.Max == 0:
				count = fmt.Sprintf("%d..N", l.Min)
			case l.Min == l.Max:
				count = fmt.Sprint(l.Min)
			}
			var mts []string
			for _, mt := range l.MediaTypes {
				mts = append(mts, "`"+mt+"`")
			}
			layers = append(layers, fmt.Sprintf("%s %s (%s)", l.Role, strings.Join(mts, ", "), count))
			if l.Role == V2RoleDisk {
				layers[len(layers)-1] = fmt.Sprintf("%s %s (%s, in order)", l.Role, strings.Join(mts, ", "), count)
			}
			if l.AnyPosition {
				layers[len(layers)-1] = fmt.Sprintf("%s %s (%s, any position)", l.Role, strings.Join(mts, ", "), count)
			}
		}
		want := fmt.Sprintf("| %s | `%s` | `%s` | %s |", spec.Kind, spec.ArtifactType, spec.ConfigMediaType, strings.Join(layers, "; "))
		if rows[i] != want {
			t.Errorf("V2 row %d:\n%s\nwant\n%s", i+1, rows[i], want)
		}
	}
}

// TestImageFormatDocMediaTypes: every application/vnd.ironcore... string
// the doc quotes is one of osimage's, unless it is one of the few the doc
// names as upstream's and not ours, or a pattern (braces, brackets,
// ellipses).
func TestImageFormatDocMediaTypes(t *testing.T) {
	b, err := os.ReadFile("../docs/image-format.md")
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{ArtifactTypeV1: true, MediaTypeConfig: true, MediaTypeManifestJSON: true}
	for _, mt := range kindMediaTypes {
		ours[mt] = true
	}
	for _, s := range v2Specs {
		ours[s.ArtifactType], ours[s.ConfigMediaType] = true, true
		for _, l := range s.Layers {
			for _, mt := range l.MediaTypes {
				ours[mt] = true
			}
		}
	}
	// Named in the doc as an older IEP revision's strings, not published.
	upstreamOnly := map[string]bool{
		"application/vnd.ironcore.image.uki.v2+json": true,
		"application/vnd.ironcore.image.efi.v2+json": true,
		"application/vnd.ironcore.raw":               true,
	}
	re := regexp.MustCompile("`(application/vnd\\.ironcore[^`]*)`")
	seen := 0
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		s := m[1]
		if strings.ContainsAny(s, "{[<") || strings.Contains(s, "...") {
			continue
		}
		seen++
		if !ours[s] && !upstreamOnly[s] {
			t.Errorf("docs/image-format.md quotes %q, which is no media type or artifactType of osimage", s)
		}
	}
	for s := range ours {
		if !strings.Contains(string(b), "`"+s+"`") {
			t.Errorf("docs/image-format.md never quotes osimage's %q", s)
		}
	}
	if seen < 20 {
		t.Errorf("only %d media types found in the doc: the pattern is wrong", seen)
	}
}
