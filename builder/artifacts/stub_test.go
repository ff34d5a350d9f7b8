package artifacts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// hostStub is Debian's x86-64 systemd-stub (systemd-boot-efi, a host
// package of make setup).
const hostStub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"

// TestCheckStub: stub.efi is written only from a PE image of the
// recipe's architecture; anything else is refused, saying what it is.
func TestCheckStub(t *testing.T) {
	testutil.RequireFiles(t, hostStub)
	notPE := filepath.Join(t.TempDir(), "linuxx64.efi.stub")
	if err := os.WriteFile(notPE, []byte("MZ but no PE header"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, arch, want string
	}{
		{"x86-64 stub, amd64", hostStub, "amd64", ""},
		{"x86-64 stub, arm64", hostStub, "arm64", "is built for PE machine 0x8664, arm64 takes 0xaa64"},
		{"not a PE", notPE, "amd64", "no systemd-stub in the image"},
		{"missing", filepath.Join(t.TempDir(), "none"), "amd64", "package systemd-boot-efi"},
	} {
		err := checkStub(tc.path, tc.arch)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestREADMEListsEveryFile: README.md's artifact table names every file a
// build ships.
func TestREADMEListsEveryFile(t *testing.T) {
	readme := string(testutil.ReadFile(t, filepath.Join(buildertest.RepoRoot(t), "README.md")))
	start := strings.Index(readme, "| artifact | file | boots by |")
	if start < 0 {
		t.Fatal("README.md: no artifact table")
	}
	table, _, _ := strings.Cut(readme[start:], "\n\n")
	for _, f := range []string{FileKernel, FileInitrd, FileCmdline, FileRootfs, FileNoRoot, FileUKI, FileStub, FileDisk, FileISO} {
		if !strings.Contains(table, "`"+f+"`") {
			t.Errorf("README.md's artifact table does not name %s", f)
		}
	}
}
