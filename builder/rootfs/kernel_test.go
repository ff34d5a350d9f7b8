package rootfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
)

// TestCheckKernelUntouched: what the recipe changed (assemble's upper
// directory) may not reach the kernel's paths, which the kernel step lifts
// from the layers below; anything else passes.
func TestCheckKernelUntouched(t *testing.T) {
	for _, tc := range []struct {
		name  string
		paths []string // created in the upper directory; a trailing / makes a directory
		want  string   // "" for no error
	}{
		{"nothing", nil, ""},
		{"files elsewhere", []string{"etc/os-builder/hello.txt", "usr/lib/os-builder/boot-report", "usr/lib/modules-load.d/x.conf"}, ""},
		{"a module", []string{"usr/lib/modules/6.1.0-test/extra/x.ko"}, "change /usr/lib/modules"},
		{"a module through /lib", []string{"lib/modules/6.1.0-test/x.ko"}, "change /lib/modules"},
		{"a kernel", []string{"boot/vmlinuz-6.1.0-test"}, "change /boot"},
		{"an emptied /boot", []string{"boot/"}, "change /boot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			upper := t.TempDir()
			for _, p := range tc.paths {
				full := filepath.Join(upper, p)
				buildertest.Must(t, os.MkdirAll(filepath.Dir(full), 0o755))
				if strings.HasSuffix(p, "/") {
					buildertest.Must(t, os.MkdirAll(full, 0o755))
				} else {
					buildertest.Must(t, os.WriteFile(full, []byte("x"), 0o644))
				}
			}
			err := checkKernelUntouched(upper)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestLiftWithoutKernel: an image without a kernel package cannot boot, and
// the error names the package to add.
func TestLiftWithoutKernel(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/lib"), 0o755)
	err := liftKernel(buildertest.OpenRoot(t, root), buildertest.TestRecipe(t).Base.Architecture, nil, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "no kernel in the image: add linux-image-amd64") {
		t.Fatalf("err = %v", err)
	}
}
