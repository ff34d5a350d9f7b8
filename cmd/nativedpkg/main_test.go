package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestAsDpkg runs the program under the names dpkg runs it by, as dpkg
// does, next to Debian's own tools: what it answers natively is theirs,
// byte for byte, and what it does not answer goes to them.
func TestAsDpkg(t *testing.T) {
	testutil.RequireTool(t, "dpkg-deb")
	testutil.RequireTool(t, "dpkg-split")
	dir := t.TempDir()
	bin := filepath.Join(dir, "nativedpkg")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, name := range []string{"dpkg-deb", "dpkg-split"} {
		if err := os.Link(bin, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// A package of Debian's tools' own making.
	pkg := filepath.Join(dir, "pkg")
	for name, data := range map[string]string{
		"DEBIAN/control":  "Package: osb-test\nVersion: 1\nArchitecture: all\nMaintainer: os-builder <osb@example.org>\nDescription: a test\n",
		"usr/share/t/one": "one\n",
	} {
		p := filepath.Join(pkg, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deb := filepath.Join(dir, "osb-test.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", pkg, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}
	run := func(name string, args ...string) ([]byte, int) {
		cmd := exec.Command(filepath.Join(dir, name), args...)
		cmd.Args[0] = name // as dpkg's execlp passes it
		out, err := cmd.Output()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return out, ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return out, 0
	}
	real := func(name string, args ...string) []byte {
		out, err := exec.Command(name, args...).Output()
		if err != nil {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		return out
	}

	if got, code := run("dpkg-deb", "--fsys-tarfile", deb); code != 0 || !bytes.Equal(got, real("dpkg-deb", "--fsys-tarfile", deb)) {
		t.Errorf("--fsys-tarfile: exit %d, %d bytes unlike dpkg-deb's", code, len(got))
	}
	if _, code := run("dpkg-deb", "--control", deb, filepath.Join(dir, "ctl")); code != 0 {
		t.Errorf("--control: exit %d", code)
	} else if b, err := os.ReadFile(filepath.Join(dir, "ctl", "control")); err != nil || !bytes.Contains(b, []byte("Package: osb-test")) {
		t.Errorf("--control: control %q, %v", b, err)
	}
	// Not a split part: exit 1, quietly, as dpkg-split -Qao.
	if out, code := run("dpkg-split", "-Qao", filepath.Join(dir, "reassemble.deb"), deb); code != 1 || len(out) != 0 {
		t.Errorf("dpkg-split -Qao of a whole package: exit %d, %q; want 1 and nothing", code, out)
	}
	// What it does not answer, the real tool does (here the host's).
	if got, code := run("dpkg-deb", "--field", deb, "Package"); code != 0 || string(got) != "osb-test\n" {
		t.Errorf("--field (the real dpkg-deb's): exit %d, %q", code, got)
	}
	if _, code := run("nativedpkg", "--fsys-tarfile", deb); code != 2 {
		t.Errorf("under its own name: exit %d, want 2", code)
	}
}
