package filehash

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSHA256(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	const want = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // sha256("abc")
	for name, f := range map[string]func(string) (string, error){"SHA256": SHA256, "SHA256Sync": SHA256Sync} {
		if got, err := f(p); err != nil || got != want {
			t.Errorf("%s = %s, %v; want %s", name, got, err, want)
		}
		if _, err := f(filepath.Join(t.TempDir(), "missing")); !os.IsNotExist(err) {
			t.Errorf("%s of a missing file: %v", name, err)
		}
	}
}

// TestSourceTreeIgnoresUmask: a checkout made under umask 002 (files 0664,
// directories 0775) hashes as one made under 022; an execute bit counts.
func TestSourceTreeIgnoresUmask(t *testing.T) {
	mk := func(dirMode, fileMode, exeMode os.FileMode) string {
		root := t.TempDir()
		for _, d := range []string{"a", "a/b"} {
			if err := os.Mkdir(filepath.Join(root, d), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(root, d), dirMode); err != nil {
				t.Fatal(err)
			}
		}
		for name, mode := range map[string]os.FileMode{"a/conf": fileMode, "a/b/run": exeMode} {
			p := filepath.Join(root, name)
			if err := os.WriteFile(p, []byte(name), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("conf", filepath.Join(root, "a/link")); err != nil {
			t.Fatal(err)
		}
		sum, err := SourceTree(filepath.Join(root, "a"))
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	umask022, umask002 := mk(0o755, 0o644, 0o755), mk(0o775, 0o664, 0o775)
	if umask022 != umask002 {
		t.Errorf("umask 022 and 002 checkouts hash differently: %s, %s", umask022, umask002)
	}
	if notExe := mk(0o755, 0o644, 0o644); notExe == umask022 {
		t.Errorf("an execute bit lost hashes the same")
	}
}
