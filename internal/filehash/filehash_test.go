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
