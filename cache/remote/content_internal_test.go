package remote

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/cache"
)

// sealOf is a seal of n regular files of size bytes each.
func sealOf(n int, size int64) *cache.Meta {
	var in cache.Inputs
	in.Add("n", fmt.Sprint(n))
	m := &cache.Meta{Step: "s", Key: in.Key(), Inputs: in, Format: 2}
	for i := range n {
		m.Files = append(m.Files, cache.File{Path: fmt.Sprintf("f%05d", i), Mode: 0o644, Size: size, MTime: 1, SHA256: strings.Repeat("0", 64)})
	}
	return m
}

// TestEntryBounds: the entry, 20,000 files of 16 GiB each, and one
// of a file too many are refused by checkManifest under the default
// limits, before any blob is fetched; an entry at the limits is not.
func TestEntryBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files int
		size  int64
		want  string
	}{
		{"20,000 files of 16 GiB", 20_000, maxFileSize, "more than the 34359738368 allowed ($OSB_CACHE_MAX_ENTRY_BYTES)"},
		{"a file too many", DefaultMaxEntryFiles + 1, 0, "20001 files, more than the 20000 allowed ($OSB_CACHE_MAX_ENTRY_FILES)"},
		{"at the limits", 2, DefaultMaxEntryBytes / 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := sealOf(tc.files, tc.size)
			seal, err := sealBytes(m)
			if err != nil {
				t.Fatal(err)
			}
			man, err := entryManifest(m, seal, "", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			_, err = checkManifest(man, m, m.Key)
			if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("checkManifest: %v, want %q", err, tc.want)
			}
		})
	}
}

// FuzzEntry: a remote entry's seal and manifest come from anyone who can
// push to the repository. The seal's key is made the key of its inputs and
// the manifest's layers, unless the fuzzer's manifest parses, are the
// seal's files, so inputs get past those checksums to the checks behind
// them. What is accepted holds only clean paths, links that stay inside,
// safe modes, and files within the limits, one layer each.
func FuzzEntry(f *testing.F) {
	good := sealOf(2, 10)
	good.Files = append(good.Files,
		cache.File{Path: "d", Mode: fs.ModeDir | 0o755},
		cache.File{Path: "d/l", Mode: fs.ModeSymlink | 0o777, Link: "../f00000"})
	b, _ := json.Marshal(good)
	f.Add(b, []byte(nil))
	f.Add([]byte(`{"step":"s","files":[{"path":"l","mode":134218239,"link":"/etc/shadow"}]}`), []byte(nil))
	f.Add([]byte(`{"step":"s","files":[{"path":"u","mode":8389101,"size":1,"mtime":1,"sha256":"00"}]}`), []byte(`{"schemaVersion":2,"layers":[{"mediaType":"`+FileType+`","size":1,"digest":"sha256:00"}]}`))
	f.Fuzz(func(t *testing.T, sealJSON, manJSON []byte) {
		var m cache.Meta
		if json.Unmarshal(sealJSON, &m) != nil {
			return
		}
		m.Key = m.Inputs.Key()
		raw, err := json.Marshal(m)
		if err != nil {
			return
		}
		seal, err := cache.ParseSeal(raw)
		if err != nil {
			return
		}
		man, err := entryManifest(seal, raw, "", time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		if len(manJSON) > 0 && json.Unmarshal(manJSON, man) != nil {
			return
		}
		files, err := checkManifest(man, seal, seal.Key)
		if err != nil {
			return
		}
		if len(files) != len(man.Layers) {
			t.Fatalf("%d files for %d layers", len(files), len(man.Layers))
		}
		var total int64
		for _, fl := range seal.Files {
			if fl.Mode&unsafeModes != 0 || fl.Kind() == "" || (fl.Kind() != "symlink" && fl.Mode.Perm()&0o002 != 0) {
				t.Fatalf("accepted %s of mode %v", fl.Path, fl.Mode)
			}
			if fl.Kind() == "symlink" && (fl.Link == "" || fl.Link[0] == '/') {
				t.Fatalf("accepted link %s -> %q", fl.Path, fl.Link)
			}
			if fl.Kind() == "file" {
				total += fl.Size
			}
		}
		if total > DefaultMaxEntryBytes || len(seal.Files) > DefaultMaxEntryFiles {
			t.Fatalf("accepted %d files of %d bytes", len(seal.Files), total)
		}
	})
}
