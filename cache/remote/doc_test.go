package remote

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestLayoutDoc: docs/build-graph.md's remote cache table names the media
// types and annotations this package writes, and no others.
func TestLayoutDoc(t *testing.T) {
	raw, err := os.ReadFile("../../docs/build-graph.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	start := strings.Index(doc, "## Remote cache")
	if start < 0 {
		t.Fatal(`docs/build-graph.md: no "## Remote cache" section`)
	}
	section := doc[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`(application/vnd\\.[^`]+)`").FindAllStringSubmatch(section, -1) {
		documented[m[1]] = true
	}
	code := map[string]bool{ArtifactType: true, SealType: true, FileType: true, SignatureType: true}
	for mt := range code {
		if !documented[mt] {
			t.Errorf("docs/build-graph.md does not name media type %s", mt)
		}
	}
	for mt := range documented {
		if !code[mt] {
			t.Errorf("docs/build-graph.md names media type %s, which the code does not write", mt)
		}
	}
	for _, a := range []string{annotationTitle, annotationCreated, annotationStep, annotationRecipe, annotationSignature} {
		if !strings.Contains(section, "`"+a+"`") {
			t.Errorf("docs/build-graph.md does not name annotation %s", a)
		}
	}
	for _, limit := range []string{"8 MiB", "16 MiB", "16 GiB", "20,000 files", "32 GiB", "`$" + MaxEntryFilesEnv + "`", "`$" + MaxEntryBytesEnv + "`"} {
		if !strings.Contains(section, limit) {
			t.Errorf("docs/build-graph.md does not state the bound %s", limit)
		}
	}
	if maxManifestSize != 8<<20 || maxSealSize != 16<<20 || maxFileSize != 16<<30 || DefaultMaxEntryFiles != 20_000 || DefaultMaxEntryBytes != 32<<30 {
		t.Errorf("the bounds changed: update docs/build-graph.md and this test")
	}
}
