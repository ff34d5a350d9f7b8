package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFillRefusesEscapingLinks: a step output whose symlink leaves the
// entry (absolute, or climbing above it, directly or through another of
// its links) is not sealed; links that stay inside are.
func TestFillRefusesEscapingLinks(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "db.key")
	if err := os.WriteFile(secret, []byte("SECRET KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		links  map[string]string // path -> target, besides a file "a" and a directory "sub/deep"
		escape bool
	}{
		{"absolute", map[string]string{"vmlinuz": secret}, true},
		{"absolute inside by name", map[string]string{"vmlinuz": "/a"}, true},
		{"dot dot", map[string]string{"vmlinuz": "../db.key"}, true},
		{"deep dot dot", map[string]string{"sub/deep/x": "../../../db.key"}, true},
		{"through a link", map[string]string{"sub/up": "..", "vmlinuz": "sub/up/../db.key"}, true},
		{"through a missing name", map[string]string{"vmlinuz": "nothere/../../db.key"}, true},
		{"loop", map[string]string{"l1": "l2", "l2": "l1"}, true},
		{"sibling", map[string]string{"vmlinuz": "a"}, false},
		{"up and back", map[string]string{"sub/deep/x": "../../a"}, false},
		{"link to a directory", map[string]string{"d": "sub/deep", "sub/up": "..", "e": "sub/up/a"}, false},
		{"dangling inside", map[string]string{"vmlinuz": "sub/none"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			in := inputs("case", tc.name)
			p, err := s.Fill(context.Background(), "kernel", in, func(dir string) error {
				if err := os.MkdirAll(filepath.Join(dir, "sub/deep"), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644); err != nil {
					return err
				}
				for l, target := range tc.links {
					if err := os.Symlink(target, filepath.Join(dir, l)); err != nil {
						return err
					}
				}
				return nil
			})
			switch {
			case tc.escape && err == nil:
				t.Fatalf("sealed an entry whose links leave it: %s", p)
			case tc.escape && tc.name != "loop" && !errors.Is(err, ErrLinkEscapes):
				t.Fatalf("fill: %v, want ErrLinkEscapes", err)
			case !tc.escape && err != nil:
				t.Fatalf("fill: %v", err)
			}
			if _, ok := s.Lookup(in.Key()); ok == tc.escape {
				t.Errorf("lookup hit %v", ok)
			}
		})
	}
}

// TestLookupRefusesEscapingLink: an entry sealed with a link that leaves it
// (by an older builder, or a cache copied from elsewhere) is a miss.
func TestLookupRefusesEscapingLink(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	in := inputs("k", "v")
	runs := 0
	p := fillSample(t, s, in, &runs)
	link := filepath.Join(p, "modules/link")
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", link); err != nil {
		t.Fatal(err)
	}
	m, err := readMeta(p)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range m.Files {
		if f.Path == "modules/link" {
			m.Files[i].Link = "/etc/passwd"
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, metaFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup(in.Key()); ok {
		t.Fatal("lookup hit an entry whose link leaves it")
	}
	if _, err := ParseSeal(b); err == nil || !strings.Contains(err.Error(), "modules/link") {
		t.Errorf("ParseSeal: %v, want an error naming modules/link", err)
	}
}

// TestCheckLinksBounds: a seal from elsewhere is not the kernel's to
// check: targets longer than PATH_MAX and chains deeper than Linux
// follows are refused, and many links through one long link cost the sum
// of their targets (each link is resolved once).
func TestCheckLinksBounds(t *testing.T) {
	link := func(p, to string) File { return File{Path: p, Mode: fs.ModeSymlink | 0o777, Link: to} }
	chain := func(n int) []File {
		var fs []File
		for i := range n {
			fs = append(fs, link(fmt.Sprintf("l%d", i), fmt.Sprintf("l%d", i+1)))
		}
		return fs
	}
	many := []File{link("long", strings.Repeat("a/", maxLinkTarget/2))}
	for i := range 100_000 {
		many = append(many, link(fmt.Sprintf("m%d", i), "long/.."))
	}
	for _, tc := range []struct {
		name  string
		files []File
		ok    bool
	}{
		{"40 deep", chain(40), true},
		{"41 deep", chain(41), false},
		{"target too long", []File{link("l", strings.Repeat("a", maxLinkTarget+1))}, false},
		{"100,000 links through a long one", many, true},
	} {
		start := time.Now()
		err := checkLinks(tc.files)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, time.Since(start))
	}
}
