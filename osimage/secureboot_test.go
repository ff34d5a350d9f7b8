package osimage_test

import (
	"testing"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/osimage/osimagetest"
)

// TestSecureBootAnnotation: what manifest.json says about signing reaches
// the OCI manifest's annotation and the boot identity read back from it;
// images without UKIs say nothing.
func TestSecureBootAnnotation(t *testing.T) {
	for _, tc := range []struct {
		name string
		sb   *osimage.SecureBoot
		want string
	}{
		{"no UKI artifacts", nil, ""},
		{"unsigned", &osimage.SecureBoot{Signed: false}, "unsigned"},
		{"signed", &osimage.SecureBoot{Signed: true, Certificate: "CN=db", CertificateSHA256: "ab12"}, "signed sha256:ab12"},
		{"signed with PCR signature", &osimage.SecureBoot{Signed: true, CertificateSHA256: "ab12", PCRSignature: true}, "signed sha256:ab12 pcrsig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			m, err := osimagetest.WriteOutputDir(dir, "amd64")
			if err != nil {
				t.Fatal(err)
			}
			m.SecureBoot = tc.sb
			img, err := osimage.NewImage(dir, m)
			if err != nil {
				t.Fatal(err)
			}
			mf, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			got, ok := mf.Annotations[osimage.AnnotationSecureBoot]
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("annotation = %q (present %v), want %q", got, ok, tc.want)
			}
			id, err := osimage.ReadIdentity(img)
			if err != nil {
				t.Fatal(err)
			}
			if id.SecureBoot != tc.want {
				t.Errorf("identity SecureBoot = %q, want %q", id.SecureBoot, tc.want)
			}
		})
	}
}
