package cache

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rewriteSameSize changes a byte of p in place and puts its mtime back:
// what bit rot, or someone covering their tracks, leaves.
func rewriteSameSize(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // a later ctime, whatever the clock's grain
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("X"), 10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
}

// readEntryMeta reads an entry's meta file.
func readEntryMeta(t *testing.T, entry string) Meta {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(entry, metaFile))
	if err != nil {
		t.Fatal(err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// countHashes counts the files checkSeal hashes while the test runs.
func countHashes(t *testing.T) *int {
	t.Helper()
	n := 0
	orig := hashSealed
	hashSealed = func(p string) (string, error) { n++; return orig(p) }
	t.Cleanup(func() { hashSealed = orig })
	return &n
}

// TestSealBindsIdentity: the seal held size and mtime only, so a file
// rewritten in place with its mtime put back was a hit. The seal now also
// holds each file's device, inode and ctime, which user space cannot set
// back: such a rewrite is a miss (and logged), without Verify.
func TestSealBindsIdentity(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var logged []string
	s.Log = func(f string, a ...any) { logged = append(logged, f) }
	in := inputs("k", "v")
	runs := 0
	entry := fillSample(t, s, in, &runs)
	hashes := countHashes(t)
	if _, ok := s.Lookup(in.Key()); !ok {
		t.Fatal("miss right after Fill")
	}
	if *hashes != 0 {
		t.Errorf("Lookup of an untouched entry hashed %d files", *hashes)
	}
	rewriteSameSize(t, filepath.Join(entry, "rootfs.tar"))
	if _, ok := s.Lookup(in.Key()); ok {
		t.Fatal("a file rewritten with its mtime put back is a hit")
	}
	if len(logged) == 0 {
		t.Error("the rewritten entry was not logged")
	}
	if err := s.Verify(in.Key()); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Errorf("Verify = %v, want a sha256 mismatch", err)
	}
}

// TestOlderSealsStillHit: entries sealed before the seal held identities
// (format 1) stay hits: each file is hashed once against its sealed
// sha256, and the entry is sealed anew, so the next lookup hashes nothing.
// A format-1 entry rewritten in place is a miss. Keys do not change.
func TestOlderSealsStillHit(t *testing.T) {
	// A key computed by the builder before the seal changed: the cache
	// key is about inputs, never about the seal.
	if got := inputs("k", "v").Key(); got != "9e54eb01e0000a5d38d7d6deec3542be9e0a9197dabbf890fc5d8c0326d3aa35" {
		t.Errorf("key changed: %s", got)
	}
	for _, damaged := range []bool{false, true} {
		s, err := Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		in := inputs("k", "v")
		runs := 0
		entry := fillSample(t, s, in, &runs)
		// What an older builder wrote: format 1, no identities.
		m := readEntryMeta(t, entry)
		m.Format = 1
		for i := range m.Files {
			m.Files[i].Dev, m.Files[i].Ino, m.Files[i].CTime = 0, 0, 0
		}
		b, _ := json.Marshal(m)
		if err := os.WriteFile(filepath.Join(entry, metaFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if damaged {
			rewriteSameSize(t, filepath.Join(entry, "rootfs.tar"))
		}
		hashes := countHashes(t)
		_, ok := s.Lookup(in.Key())
		if ok == damaged {
			t.Fatalf("damaged %v: hit %v", damaged, ok)
		}
		if damaged {
			continue
		}
		if *hashes != 2 {
			t.Errorf("first lookup hashed %d files, want the 2 regular files", *hashes)
		}
		m = readEntryMeta(t, entry)
		if m.Format != sealFormat {
			t.Errorf("entry not sealed anew: format %d", m.Format)
		}
		for _, f := range m.Files {
			if f.Mode.IsRegular() && f.Ino == 0 {
				t.Errorf("%s sealed anew without its inode", f.Path)
			}
		}
		*hashes = 0
		if _, ok := s.Lookup(in.Key()); !ok || *hashes != 0 {
			t.Errorf("second lookup: hit %v, %d files hashed", ok, *hashes)
		}
	}
}

// TestCopiedCacheStillHits: a cache copied with cp -a (or restored by CI
// from an archive) has new inodes and ctimes: each entry is hashed once
// and sealed anew, and a copy whose file was changed in place is a miss.
func TestCopiedCacheStillHits(t *testing.T) {
	src := t.TempDir()
	s, err := Open(src)
	if err != nil {
		t.Fatal(err)
	}
	in := inputs("k", "v")
	runs := 0
	fillSample(t, s, in, &runs)
	for _, tamper := range []bool{false, true} {
		dst := filepath.Join(t.TempDir(), "copy")
		if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp -a: %v\n%s", err, out)
		}
		if tamper {
			rewriteSameSize(t, filepath.Join(dst, "entries", in.Key(), "rootfs.tar"))
		}
		c, err := Open(dst)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.Lookup(in.Key()); ok == tamper {
			t.Errorf("copy (tampered %v): hit %v", tamper, ok)
		}
	}
}
