package publish

import (
	"bytes"
	"strings"
	"testing"
)

// TestWriteInspectionSecureBoot: inspect shows how the UKIs are signed,
// and shows nothing for images that do not say.
func TestWriteInspectionSecureBoot(t *testing.T) {
	for _, tc := range []struct{ sb, want string }{
		{"unsigned", "Secure Boot:    unsigned"},
		{"signed sha256:ab12 pcrsig", "Secure Boot:    signed sha256:ab12 pcrsig"},
		{"", ""},
	} {
		var buf bytes.Buffer
		ins := &Inspection{Manifests: []InspectedManifest{{SecureBoot: tc.sb}}}
		if err := WriteInspection(&buf, ins, false); err != nil {
			t.Fatal(err)
		}
		if got := buf.String(); tc.want == "" && strings.Contains(got, "Secure Boot") || !strings.Contains(got, tc.want) {
			t.Errorf("secureBoot %q:\n%s", tc.sb, got)
		}
	}
}
