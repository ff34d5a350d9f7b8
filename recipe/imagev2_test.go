package recipe

import (
	"os"
	"path/filepath"
	"testing"
)

// TestImageV2Field: imageV2 is read as written, and left unset when the
// recipe does not say (the builder then publishes V2; see
// docs/image-format.md).
func TestImageV2Field(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string
	}{
		{"", "unset"},
		{"imageV2: false\n", "false"},
		{"imageV2: true\n", "true"},
	} {
		dir := t.TempDir()
		p := filepath.Join(dir, "r.yaml")
		if err := os.WriteFile(p, []byte("name: r\nversion: \"1\"\nbase:\n  distribution: debian\n"+tc.line), 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		got := "unset"
		if r.ImageV2 != nil {
			got = map[bool]string{true: "true", false: "false"}[*r.ImageV2]
		}
		if got != tc.want {
			t.Errorf("%q: imageV2 %s, want %s", tc.line, got, tc.want)
		}
	}
}
