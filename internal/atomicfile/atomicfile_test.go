package atomicfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/atomicfile"
)

func TestWriteReplacesWholeOrNothing(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := atomicfile.WriteFile(p, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := atomicfile.Write(p, 0o644, func(f *os.File) error {
		f.WriteString("half")
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("a failed write changed the file: %q", b)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v, want 0640", fi.Mode().Perm())
	}
	if des, _ := os.ReadDir(dir); len(des) != 1 {
		t.Errorf("temp files left behind: %v", des)
	}
}

// TestConcurrentWriters: writers of one path never share a temp file, so
// each rename installs one writer's whole content.
func TestConcurrentWriters(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	var wg sync.WaitGroup
	contents := map[string]bool{}
	for i := range 16 {
		c := string(rune('a'+i)) + "-content-of-one-writer"
		contents[c] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := atomicfile.WriteFile(p, []byte(c), 0o644); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if b, _ := os.ReadFile(p); !contents[string(b)] {
		t.Errorf("content %q is no single writer's", b)
	}
}
