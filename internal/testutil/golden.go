package testutil

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update is registered once here, so every test binary that imports this
// package accepts -update (go test ./recipe -update) and none may declare
// its own.
var update = flag.Bool("update", false, "rewrite golden files")

// Updating reports whether -update was given.
func Updating() bool { return *update }

// Golden compares got with the file at path; with -update it first writes
// got there (creating the directory), so the comparison then holds.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs (run the test with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
