package ocistore

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

type entry struct {
	name, link, body string
	typ              byte
	size             int64 // header size when not len(body)
}

func tarBytes(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.size != 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body)) // a short body makes a truncated archive on purpose
	}
	tw.Flush()
	return buf.Bytes()
}

// untarConfined unpacks data into a fresh dir and checks that nothing
// appeared outside it, that it holds no links, and that the files written
// add up to no more than the archive. It returns Untar's error and dir.
func untarConfined(t testing.TB, data []byte) (string, error) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "a.tar")
	if err := os.WriteFile(archive, data, 0o644); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "target")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	err := Untar(archive, dir)
	confined(t, parent, dir, int64(len(data)))
	return dir, err
}

// confined checks that parent holds nothing but dir, that dir holds no
// links, and that its files add up to no more than limit bytes.
func confined(t testing.TB, parent, dir string, limit int64) {
	t.Helper()
	var total int64
	werr := filepath.WalkDir(parent, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != parent && p != dir && !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Errorf("written outside the target: %s", p)
		}
		if d.Type()&fs.ModeSymlink != 0 {
			t.Errorf("link made: %s", p)
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
		}
		return nil
	})
	if werr != nil {
		t.Fatal(werr)
	}
	if total > limit {
		t.Errorf("wrote %d bytes from a %d-byte archive", total, limit)
	}
}

func TestUntarHostile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []entry
		files   map[string]string // expected regular files in dir
		wantErr string
	}{
		{name: "layout", entries: []entry{{name: "blobs/", typ: tar.TypeDir}, {name: "blobs/sha256/ab", typ: tar.TypeReg, body: "blob"}, {name: "index.json", typ: tar.TypeReg, body: "{}"}},
			files: map[string]string{"blobs/sha256/ab": "blob", "index.json": "{}"}},
		{name: "dot-dot", entries: []entry{{name: "../../escaped", typ: tar.TypeReg, body: "x"}}, files: map[string]string{"escaped": "x"}},
		{name: "absolute", entries: []entry{{name: "/etc/escaped", typ: tar.TypeReg, body: "x"}}, files: map[string]string{"etc/escaped": "x"}},
		{name: "symlink then through it", entries: []entry{{name: "l", typ: tar.TypeSymlink, link: "/tmp"}, {name: "l/escaped", typ: tar.TypeReg, body: "x"}},
			files: map[string]string{"l/escaped": "x"}},
		{name: "hardlink skipped", entries: []entry{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}, files: map[string]string{}},
		{name: "huge size", entries: []entry{{name: "big", typ: tar.TypeReg, size: 1 << 40}}, wantErr: "more than the archive holds"},
		{name: "truncated", entries: []entry{{name: "cut", typ: tar.TypeReg, body: "abc", size: 600}}, wantErr: "archive"},
		{name: "file where a dir must go", entries: []entry{{name: "a", typ: tar.TypeReg, body: "x"}, {name: "a/b", typ: tar.TypeReg, body: "y"}}, wantErr: `"a/b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := untarConfined(t, tarBytes(t, tc.entries...))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					b, _ := os.ReadFile(p)
					rel, _ := filepath.Rel(dir, p)
					got[rel] = string(b)
				}
				return err
			})
			if len(got) != len(tc.files) {
				t.Errorf("files = %v, want %v", got, tc.files)
			}
			for f, body := range tc.files {
				if got[f] != body {
					t.Errorf("%s = %q, want %q", f, got[f], body)
				}
			}
		})
	}
}

// FuzzUntar: whatever the archive, untar writes only inside its target,
// makes no links, and writes no more bytes than the archive has. The
// headers' checksums are fixed (testutil.FixTarChecksums) so that
// mutations reach untar rather than tar's checksum test, and the target
// is one directory (testutil.ScratchDir), emptied after each input.
func FuzzUntar(f *testing.F) {
	for _, es := range [][]entry{
		{{name: "index.json", typ: tar.TypeReg, body: "{}"}, {name: "blobs/sha256/ab", typ: tar.TypeReg, body: "blob"}},
		{{name: "../../escaped", typ: tar.TypeReg, body: "x"}, {name: "/abs", typ: tar.TypeReg, body: "y"}},
		{{name: "l", typ: tar.TypeSymlink, link: "../.."}, {name: "l/escaped", typ: tar.TypeReg, body: "x"}},
		{{name: "d", typ: tar.TypeDir}, {name: "d/h", typ: tar.TypeLink, link: "../../x"}},
		{{name: "big", typ: tar.TypeReg, size: 1 << 40}},
		{{name: "a", typ: tar.TypeReg, body: "x"}, {name: "a/b", typ: tar.TypeReg, body: "y"}},
	} {
		f.Add(tarBytes(f, es...))
	}
	parent := testutil.ScratchDir(f)
	dir := filepath.Join(parent, "target")
	f.Fuzz(func(t *testing.T, data []byte) {
		data = bytes.Clone(data)
		testutil.FixTarChecksums(data)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		_ = untar(bytes.NewReader(data), int64(len(data)), root)
		root.Close()
		confined(t, parent, dir, int64(len(data)))
	})
}
