package osimage

import (
	"os"
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
