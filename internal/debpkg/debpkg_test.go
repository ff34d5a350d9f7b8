package debpkg

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// buildDeb makes a package with Debian's dpkg-deb, compressed with comp.
func buildDeb(t *testing.T, comp string) string {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "pkg")
	files := map[string]struct {
		mode os.FileMode
		data string
	}{
		"DEBIAN/control":    {0o644, "Package: osb-test\nVersion: 1\nArchitecture: all\nMaintainer: os-builder <osb@example.org>\nDescription: a test\n"},
		"DEBIAN/postinst":   {0o755, "#!/bin/sh\nexit 0\n"},
		"DEBIAN/conffiles":  {0o644, "/etc/osb-test.conf\n"},
		"DEBIAN/md5sums":    {0o644, "d41d8cd98f00b204e9800998ecf8427e  usr/bin/osb-test\n"},
		"etc/osb-test.conf": {0o644, "key=value\n"},
		"usr/bin/osb-test":  {0o755, strings.Repeat("binary\x00", 10000)},
	}
	for name, f := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(dir, "osb-test-"+comp+".deb")
	cmd := exec.Command("dpkg-deb", "--root-owner-group", "-Z"+comp, "--build", root, deb)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}
	return deb
}

// debsUnderTest: packages dpkg-deb built with each compression it
// writes, and, with $OSB_DEBPKG_DIR, every .deb there (the builder's
// .deb pool, say: hundreds of Debian's own packages).
func debsUnderTest(t *testing.T) []string {
	testutil.RequireTool(t, "dpkg-deb")
	var debs []string
	for _, comp := range []string{"xz", "zstd", "gzip", "none"} {
		debs = append(debs, buildDeb(t, comp))
	}
	if dir := os.Getenv("OSB_DEBPKG_DIR"); dir != "" {
		more, err := filepath.Glob(filepath.Join(dir, "*.deb"))
		if err != nil || len(more) == 0 {
			t.Fatalf("$OSB_DEBPKG_DIR=%s: no .deb (%v)", dir, err)
		}
		debs = append(debs, more...)
	}
	return debs
}

// TestFsysTarfileAsDpkgDeb: the tree is the same stream, byte for byte, as
// Debian's dpkg-deb --fsys-tarfile gives.
func TestFsysTarfileAsDpkgDeb(t *testing.T) {
	for _, deb := range debsUnderTest(t) {
		want, err := exec.Command("dpkg-deb", "--fsys-tarfile", deb).Output()
		if err != nil {
			t.Fatalf("dpkg-deb --fsys-tarfile %s: %v", deb, err)
		}
		var got bytes.Buffer
		if err := FsysTarfile(&got, deb); err != nil {
			t.Fatalf("FsysTarfile(%s): %v", deb, err)
		}
		if sha256.Sum256(got.Bytes()) != sha256.Sum256(want) {
			t.Errorf("%s: %d bytes, dpkg-deb gives %d other ones", filepath.Base(deb), got.Len(), len(want))
		}
	}
}

// TestControlAsDpkgDeb: the control directory has the files, modes and
// times Debian's dpkg-deb --control gives, into a new directory and into
// one that exists with a file in the way.
func TestControlAsDpkgDeb(t *testing.T) {
	for _, deb := range debsUnderTest(t) {
		for _, exists := range []bool{false, true} {
			dir := t.TempDir()
			want, got := filepath.Join(dir, "want"), filepath.Join(dir, "got")
			if exists {
				for _, d := range []string{want, got} {
					if err := os.Mkdir(d, 0o700); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(d, "control"), []byte("in the way"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			if out, err := exec.Command("dpkg-deb", "--control", deb, want).CombinedOutput(); err != nil {
				t.Fatalf("dpkg-deb --control %s: %v\n%s", deb, err, out)
			}
			if err := Control(deb, got); err != nil {
				t.Fatalf("Control(%s): %v", deb, err)
			}
			if w, g := describe(t, want), describe(t, got); w != g {
				t.Errorf("%s (directory existed: %v):\ndpkg-deb:\n%s\nControl:\n%s", filepath.Base(deb), exists, w, g)
			}
		}
	}
}

// describe lists dir's entries: name, mode, mtime, owner, content digest.
func describe(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %v %s", rel, fi.Mode(), fi.ModTime().UTC().Format(time.RFC3339))
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %x", sha256.Sum256(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestIsSplitPart(t *testing.T) {
	testutil.RequireTool(t, "dpkg-split")
	deb := buildDeb(t, "none")
	if part, err := IsSplitPart(deb); err != nil || part {
		t.Fatalf("IsSplitPart(whole package) = %v, %v", part, err)
	}
	// dpkg-split's own parts (the package is ~70 KB uncompressed: 20 KiB parts).
	dir := t.TempDir()
	if out, err := exec.Command("dpkg-split", "--split", "--partsize", "20", deb, filepath.Join(dir, "part")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-split --split: %v\n%s", err, out)
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "part*"))
	if len(parts) < 2 {
		t.Fatalf("dpkg-split made %v", parts)
	}
	for _, p := range parts {
		if part, err := IsSplitPart(p); err != nil || !part {
			t.Errorf("IsSplitPart(%s) = %v, %v", filepath.Base(p), part, err)
		}
	}
}

// TestRefused: what is not a package is an error, and what this package
// does not read is ErrUnsupported (the real tool's), each before anything
// is written.
func TestRefused(t *testing.T) {
	dir := t.TempDir()
	n := 0
	ar := func(members ...string) string {
		var b bytes.Buffer
		b.WriteString(arMagic)
		for i := 0; i+1 < len(members); i += 2 {
			fmt.Fprintf(&b, "%-16s%-12s%-6s%-6s%-8s%-10d`\n", members[i], "0", "0", "0", "100644", len(members[i+1]))
			b.WriteString(members[i+1])
			if len(members[i+1])%2 == 1 {
				b.WriteString("\n")
			}
		}
		n++
		p := filepath.Join(dir, fmt.Sprintf("%d.deb", n))
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name        string
		deb         string
		unsupported bool
		want        string
	}{
		{"not ar", func() string { p := filepath.Join(dir, "x"); os.WriteFile(p, []byte("hello"), 0o644); return p }(), false, "no ar magic"},
		{"no debian-binary", ar("control.tar", "", "data.tar", ""), true, "not debian-binary"},
		{"format 3", ar("debian-binary", "3.0\n", "data.tar", ""), true, "format"},
		{"lzma", ar("debian-binary", "2.0\n", "control.tar", "", "data.tar.lzma", "x"), true, "compression"},
		{"size past the end", arMagic + "debian-binary   0           0     0     100644  99999     `\n2.0\n", false, "past the end"},
		{"no data member", ar("debian-binary", "2.0\n", "control.tar", ""), false, "no data.tar member"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deb := tc.deb
			if strings.HasPrefix(deb, arMagic) {
				deb = filepath.Join(dir, "raw.deb")
				os.WriteFile(deb, []byte(tc.deb), 0o644)
			}
			var out bytes.Buffer
			err := FsysTarfile(&out, deb)
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrUnsupported) != tc.unsupported {
				t.Fatalf("FsysTarfile = %v, want %q (unsupported: %v)", err, tc.want, tc.unsupported)
			}
			if out.Len() != 0 {
				t.Errorf("%d bytes written before the error", out.Len())
			}
		})
	}
	// A control archive with a subdirectory: the real dpkg-deb's, and
	// nothing is extracted.
	var tarball bytes.Buffer
	tw := tar.NewWriter(&tarball)
	for _, h := range []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./control", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./sub/file", Typeflag: tar.TypeReg, Mode: 0o644},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	p := ar("debian-binary", "2.0\n", "control.tar", tarball.String(), "data.tar", "")
	err := Control(p, filepath.Join(dir, "ctl"))
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Control(nested) = %v, want ErrUnsupported", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ctl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory was made: %v", err)
	}
}
