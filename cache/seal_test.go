package cache

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fillSample fills an entry with a file, a subdirectory and a symlink.
func fillSample(t *testing.T, s *Store, in Inputs, runs *int) string {
	t.Helper()
	p, err := s.Fill(context.Background(), "step", in, func(dir string) error {
		*runs++
		if err := os.WriteFile(filepath.Join(dir, "rootfs.tar"), []byte(strings.Repeat("payload ", 1000)), 0o644); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Join(dir, "modules/kernel"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "modules/kernel/a.ko"), []byte("module"), 0o644); err != nil {
			return err
		}
		return os.Symlink("kernel/a.ko", filepath.Join(dir, "modules/link"))
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDamagedEntryIsAMiss: an entry that no longer matches its seal is a
// miss, never a hit, and the next Fill rebuilds it.
func TestDamagedEntryIsAMiss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, entry string)
	}{
		{"truncated file", func(t *testing.T, e string) {
			if err := os.Truncate(filepath.Join(e, "rootfs.tar"), 100); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty file", func(t *testing.T, e string) {
			if err := os.Truncate(filepath.Join(e, "modules/kernel/a.ko"), 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"rewritten same size", func(t *testing.T, e string) {
			time.Sleep(10 * time.Millisecond) // a later mtime
			if err := os.WriteFile(filepath.Join(e, "modules/kernel/a.ko"), []byte("MODULE"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"missing file", func(t *testing.T, e string) {
			if err := os.Remove(filepath.Join(e, "modules/kernel/a.ko")); err != nil {
				t.Fatal(err)
			}
		}},
		{"extra file", func(t *testing.T, e string) {
			if err := os.WriteFile(filepath.Join(e, "modules/stray"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink retargeted", func(t *testing.T, e string) {
			os.Remove(filepath.Join(e, "modules/link"))
			if err := os.Symlink("elsewhere", filepath.Join(e, "modules/link")); err != nil {
				t.Fatal(err)
			}
		}},
		{"meta truncated", func(t *testing.T, e string) {
			if err := os.Truncate(filepath.Join(e, metaFile), 40); err != nil {
				t.Fatal(err)
			}
		}},
		{"meta missing", func(t *testing.T, e string) {
			if err := os.Remove(filepath.Join(e, metaFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{"unsealed meta (older builder)", func(t *testing.T, e string) {
			b, _ := json.Marshal(Meta{Step: "step", Key: filepath.Base(e)})
			if err := os.WriteFile(filepath.Join(e, metaFile), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			var logged []string
			s.Log = func(f string, a ...any) { logged = append(logged, f) }
			in := inputs("k", "v")
			runs := 0
			entry := fillSample(t, s, in, &runs)
			if _, ok := s.Lookup(in.Key()); !ok {
				t.Fatal("miss right after Fill")
			}
			tc.damage(t, entry)
			if _, ok := s.Lookup(in.Key()); ok {
				t.Fatal("a damaged entry is a hit")
			}
			if len(logged) == 0 {
				t.Error("the damaged entry was not logged")
			}
			fillSample(t, s, in, &runs)
			if runs != 2 {
				t.Errorf("fill ran %d times, want 2 (the damaged entry refilled)", runs)
			}
			if _, ok := s.Lookup(in.Key()); !ok {
				t.Fatal("miss after the refill")
			}
			if err := s.Verify(in.Key()); err != nil {
				t.Errorf("Verify after the refill: %v", err)
			}
		})
	}
}

// TestVerifyCatchesSilentCorruption: bytes changed in place with the mtime
// put back used to pass Lookup's cheap check; the ctime in the seal now
// makes them a miss there too, and Verify's hashes catch them.
func TestVerifyCatchesSilentCorruption(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := inputs("k", "v")
	runs := 0
	entry := fillSample(t, s, in, &runs)
	if err := s.Verify(in.Key()); err != nil {
		t.Fatalf("Verify of a fresh entry: %v", err)
	}
	p := filepath.Join(entry, "rootfs.tar")
	fi, _ := os.Stat(p)
	time.Sleep(10 * time.Millisecond) // a later ctime, whatever the clock's grain
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("X"), 10)
	f.Close()
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	if _, ok := s.Lookup(in.Key()); ok {
		t.Error("Lookup hit a file changed in place (same size and mtime, new ctime)")
	}
	if err := s.Verify(in.Key()); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("Verify = %v, want a sha256 mismatch", err)
	}
}

// TestTouchKeepsEntryValid: prune's use marker changes only the entry
// directory, which the seal leaves out.
func TestTouchKeepsEntryValid(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := inputs("k", "v")
	runs := 0
	fillSample(t, s, in, &runs)
	s.Touch(in.Key())
	if _, ok := s.Lookup(in.Key()); !ok {
		t.Error("Touch made the entry a miss")
	}
}

// FuzzParseMeta: a meta file comes from a shared, possibly damaged volume.
// Parsing never panics, and what it accepts has clean relative paths.
func FuzzParseMeta(f *testing.F) {
	f.Add([]byte(`{"step":"s","key":"k","format":1,"files":[{"path":"a/b","mode":420,"size":3,"mtime":1,"sha256":"00"}]}`))
	f.Add([]byte(`{"files":[{"path":"../x"}]}`))
	f.Add([]byte(`{"files":[{"path":"a"},{"path":"a"}]}`))
	f.Add([]byte(`{"files":[{"path":"/etc/passwd","size":-1}]}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(`{"files":[{"path":"d","mode":2147484141},{"path":"d/up","mode":134218239,"link":".."},{"path":"x","mode":134218239,"link":"d/up/d/a"}]}`))
	f.Add([]byte(`{"files":[{"path":"l","mode":134218239,"link":"d/../../k"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseMeta(b)
		if err != nil {
			return
		}
		for _, fl := range m.Files {
			top := !strings.Contains(fl.Path, "/")
			if fl.Mode&fs.ModeSymlink != 0 && (fl.Link == "" || filepath.IsAbs(fl.Link) || top && (fl.Link == ".." || strings.HasPrefix(fl.Link, "../"))) {
				t.Fatalf("accepted link %s -> %q", fl.Path, fl.Link)
			}
		}
		seen := map[string]bool{}
		for _, fl := range m.Files {
			if fl.valid() != nil || seen[fl.Path] || strings.HasPrefix(fl.Path, "../") || filepath.IsAbs(fl.Path) {
				t.Fatalf("accepted bad file %+v", fl)
			}
			seen[fl.Path] = true
		}
	})
}
