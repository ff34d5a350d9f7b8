package initrd

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
)

// FuzzArchive adds a file, a symlink and a directory with fuzzed names,
// contents and target, writes the archive and reads it back with a cpio
// reader, checking what the kernel's unpacker would see: names and symlink
// targets are C strings there, so every name read must be a name added,
// NUL-free and within PATH_MAX, and contents and targets must come back
// unchanged. An archive is the initrd the init itself comes from: a name
// that reads back as another one (e.g. "init\x00x" as "init") replaces a
// file the builder put there.
func FuzzArchive(f *testing.F) {
	f.Add("etc/hostname", []byte("node\n"), "bin", "usr/bin", "lib/modules")
	f.Add("/init", []byte{}, "./x/../y", "/abs/target", "a/b/c/")
	f.Add("init\x00x", []byte("evil"), "l", "t\x00u", "d")
	f.Fuzz(func(t *testing.T, file string, data []byte, link, target, dir string) {
		a := NewArchive()
		added := map[string]bool{}
		if a.AddFile(file, 0o644, data) == nil {
			n, _ := cleanPath(file)
			added[n] = true
		}
		if a.AddSymlink(link, target) == nil {
			n, _ := cleanPath(link)
			added[n] = true
		}
		if a.AddDir(dir, 0o755) == nil {
			n, _ := cleanPath(dir)
			added[n] = true
		}
		if len(added) == 0 {
			return
		}
		var buf bytes.Buffer
		if err := a.Encode(&buf, WriteOptions{SourceDateEpoch: testEpoch}); err != nil {
			return // refused as a whole (e.g. too large): nothing written
		}
		r := cpio.NewReader(&buf)
		seen := map[string]bool{}
		for {
			h, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("the archive does not read back: %v", err)
			}
			body, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("%q: %v", h.Name, err)
			}
			if strings.IndexByte(h.Name, 0) >= 0 || len(h.Name)+1 > kernelPathMax {
				t.Fatalf("name %q: the kernel reads another name, or none", h.Name)
			}
			if seen[h.Name] {
				t.Fatalf("%q written twice", h.Name)
			}
			seen[h.Name] = true
			n, _ := cleanPath(file)
			switch {
			case h.Mode.IsRegular() && h.Name == n && !bytes.Equal(body, data):
				t.Fatalf("%q: contents differ", h.Name)
			case h.Mode&cpio.TypeSymlink == cpio.TypeSymlink:
				if l := h.Linkname; strings.IndexByte(l, 0) >= 0 || len(l)+1 > kernelPathMax || l != target {
					t.Fatalf("symlink %q -> %q: the kernel reads another target than %q", h.Name, l, target)
				}
			}
		}
		for n := range added {
			if !seen[n] {
				t.Fatalf("%q added but not read back; read %v", n, seen)
			}
		}
	})
}
