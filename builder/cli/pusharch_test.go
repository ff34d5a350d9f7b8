package cli

import (
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/publish"
)

func TestArchRef(t *testing.T) {
	for _, tt := range []struct{ ref, want string }{
		{"oci:out/oci:0.1.0", "oci:out/oci:0.1.0-arm64"},
		{"oci:out/oci", ""},
		{"registry.example:5000/os/test:0.1.0", "registry.example:5000/os/test:0.1.0-arm64"},
		{"registry.example/os/test@sha256:" + strings.Repeat("0", 64), ""},
	} {
		got, err := archRef(tt.ref, "arm64", publish.Options{})
		if err != nil || got != tt.want {
			t.Errorf("archRef(%s) = %q, %v; want %q", tt.ref, got, err, tt.want)
		}
	}
}
