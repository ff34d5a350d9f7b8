package publish_test

import (
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/publish"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		in, path, tag, remote, err string
	}{
		{in: "oci:out/oci", path: "out/oci"},
		{in: "oci:out/oci:1.2.0", path: "out/oci", tag: "1.2.0"},
		{in: "oci:/abs/dir:latest", path: "/abs/dir", tag: "latest"},
		{in: "oci:./a:b/c", path: "./a:b/c"},
		{in: "oci:", err: "empty layout path"},
		{in: "oci::tag", err: "empty layout path"},
		{in: "oci:x:bad tag", err: "invalid tag"},
		{in: "registry.example:5000/os-images/hv:1.2.0", remote: "registry.example:5000/os-images/hv:1.2.0"},
		{in: "ghcr.io/ironcore-dev/os-images/hv@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", remote: "ghcr.io/ironcore-dev/os-images/hv@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		{in: "UPPER/case:x", err: "parse reference"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := publish.ParseTarget(tt.in, publish.Options{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.remote != "" {
				if got.Remote == nil || got.Remote.String() != tt.remote {
					t.Errorf("remote = %v", got.Remote)
				}
				return
			}
			if got.Remote != nil || got.LayoutPath != tt.path || got.LayoutTag != tt.tag {
				t.Errorf("got %+v", got)
			}
			if got.String() != tt.in {
				t.Errorf("String() = %q", got.String())
			}
		})
	}
}

func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"oci:out/oci:1", "oci:", "localhost:5000/a/b:c", "a@sha256:00", "oci:a/b:c/d:e"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := publish.ParseTarget(s, publish.Options{})
		if err != nil {
			return
		}
		// A parsed layout target renders back to something that parses the same.
		if got.Remote == nil {
			again, err := publish.ParseTarget(got.String(), publish.Options{})
			if err != nil || again.LayoutPath != got.LayoutPath || again.LayoutTag != got.LayoutTag {
				t.Errorf("%q -> %+v -> %q -> %+v, %v", s, got, got.String(), again, err)
			}
		}
	})
}
