package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// bootTest is a test as docs/boots.md names it: `PKG.TestName`.
var bootTest = regexp.MustCompile("`([a-z0-9][a-z0-9/]*)\\.(Test[A-Za-z0-9_]+)")

// TestBootsDocNamesRealTests: every test docs/boots.md lists (the suite's
// QEMU boots, what each proves) is a test function of that package, so the
// list cannot keep a boot the code no longer has under a name.
func TestBootsDocNamesRealTests(t *testing.T) {
	b, err := os.ReadFile("boots.md")
	if err != nil {
		t.Fatal(err)
	}
	found := bootTest.FindAllStringSubmatch(string(b), -1)
	if len(found) < 20 {
		t.Fatalf("boots.md names %d tests; the list is gone?", len(found))
	}
	sources := map[string]string{}
	for _, m := range found {
		pkg, name := m[1], m[2]
		src, ok := sources[pkg]
		if !ok {
			files, _ := filepath.Glob(filepath.Join("..", pkg, "*_test.go"))
			var all strings.Builder
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				all.Write(data)
			}
			src = all.String()
			sources[pkg] = src
		}
		if !strings.Contains(src, "func "+name+"(") {
			t.Errorf("boots.md names %s.%s: no such test in %s", pkg, name, pkg)
		}
	}
}
