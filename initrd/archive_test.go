package initrd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

const testEpoch = 1700000000

// makeTree writes a small tree with a symlink, a hardlink pair, a setuid
// file and nested directories.
func makeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "usr/bin"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "etc/private"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "usr/bin/tool"), []byte("#!/bin/sh\necho tool\n"), 0o755))
	must(os.Chmod(filepath.Join(dir, "usr/bin/tool"), 0o755|os.ModeSetuid))
	must(os.WriteFile(filepath.Join(dir, "etc/hostname"), []byte("node\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "etc/private/key"), []byte("secret"), 0o600))
	must(os.Link(filepath.Join(dir, "usr/bin/tool"), filepath.Join(dir, "usr/bin/tool-alias")))
	must(os.Symlink("usr/bin", filepath.Join(dir, "bin")))
	must(os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644))
	return dir
}

func buildArchive(t *testing.T, tree string) *Archive {
	t.Helper()
	a := NewArchive()
	if err := a.AddTree(tree, "/"); err != nil {
		t.Fatal(err)
	}
	if err := a.AddCharDevice("/dev/console", 0o600, 5, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.AddFile("/init", 0o755, []byte("init")); err != nil {
		t.Fatal(err)
	}
	return a
}

func encode(t *testing.T, a *Archive, c Compression) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := a.Encode(&buf, WriteOptions{SourceDateEpoch: testEpoch, Compression: c}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestEncodeReproducible(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionZstd, CompressionGzip} {
		t.Run(string(c), func(t *testing.T) {
			// Two trees with the same contents, made at different times
			// with different inode numbers, must give the same bytes.
			one := encode(t, buildArchive(t, makeTree(t)), c)
			two := encode(t, buildArchive(t, makeTree(t)), c)
			if !bytes.Equal(one, two) {
				t.Fatalf("two builds differ (%d vs %d bytes)", len(one), len(two))
			}
		})
	}
}

func TestEncodeOrderIndependent(t *testing.T) {
	a, b := NewArchive(), NewArchive()
	add := func(a *Archive, names ...string) {
		for _, n := range names {
			if err := a.AddFile(n, 0o644, []byte(n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	add(a, "/z/1", "/a/2", "/a-b/3")
	add(b, "/a-b/3", "/z/1", "/a/2")
	if !bytes.Equal(encode(t, a, CompressionNone), encode(t, b, CompressionNone)) {
		t.Fatal("insertion order changed the output")
	}
}

type readEntry struct {
	mode     cpio.FileMode
	ino      int64
	links    int
	size     int64
	data     string
	linkname string
	mtime    int64
	uid, gid int
}

func readBack(t *testing.T, r io.Reader) ([]string, map[string]readEntry) {
	t.Helper()
	cr := cpio.NewReader(r)
	var order []string
	got := map[string]readEntry{}
	for {
		h, err := cr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(cr)
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, h.Name)
		got[h.Name] = readEntry{h.Mode, h.Inode, h.Links, h.Size, string(data), h.Linkname, h.ModTime.Unix(), h.Uid, h.Guid}
	}
	return order, got
}

func TestRoundTrip(t *testing.T) {
	for _, c := range []Compression{CompressionNone, CompressionZstd, CompressionGzip} {
		t.Run(string(c), func(t *testing.T) {
			a := buildArchive(t, makeTree(t))
			if err := a.SetOwner("/etc/hostname", 100, 101); err != nil {
				t.Fatal(err)
			}
			raw := encode(t, a, c)
			var r io.Reader = bytes.NewReader(raw)
			switch c {
			case CompressionZstd:
				d, err := zstd.NewReader(r)
				if err != nil {
					t.Fatal(err)
				}
				defer d.Close()
				r = d
			case CompressionGzip:
				g, err := gzip.NewReader(r)
				if err != nil {
					t.Fatal(err)
				}
				r = g
			}
			order, got := readBack(t, r)
			if !sort.StringsAreSorted(order) {
				t.Errorf("entries not sorted: %v", order)
			}
			wantOrder := []string{"bin", "dev", "dev/console", "empty", "etc", "etc/hostname", "etc/private",
				"etc/private/key", "init", "usr", "usr/bin", "usr/bin/tool", "usr/bin/tool-alias"}
			if strings.Join(order, " ") != strings.Join(wantOrder, " ") {
				t.Errorf("entries:\n got %v\nwant %v", order, wantOrder)
			}
			for name, e := range got {
				if e.mtime != testEpoch {
					t.Errorf("%s: mtime %d", name, e.mtime)
				}
			}
			check := func(name string, mode cpio.FileMode, data string) {
				t.Helper()
				e := got[name]
				if e.mode != mode || e.data != data {
					t.Errorf("%s: mode %o data %q, want %o %q", name, e.mode, e.data, mode, data)
				}
			}
			check("etc/hostname", cpio.TypeReg|0o644, "node\n")
			check("etc/private", cpio.TypeDir|0o700, "")
			check("etc/private/key", cpio.TypeReg|0o600, "secret")
			check("dev/console", cpio.TypeChar|0o600, "")
			check("init", cpio.TypeReg|0o755, "init")
			check("empty", cpio.TypeReg|0o644, "")
			if e := got["bin"]; e.mode != cpio.TypeSymlink|0o777 || e.linkname != "usr/bin" {
				t.Errorf("bin: mode %o link %q", e.mode, e.linkname)
			}
			if e := got["etc/hostname"]; e.uid != 100 || e.gid != 101 {
				t.Errorf("etc/hostname owner %d:%d", e.uid, e.gid)
			}
			if e := got["etc"]; e.uid != 0 || e.links != 3 {
				t.Errorf("etc: uid %d links %d, want 0 and 3", e.uid, e.links)
			}
			// The hardlink pair: one inode, two links, data once (with
			// the last name, as GNU cpio does).
			tool, alias := got["usr/bin/tool"], got["usr/bin/tool-alias"]
			if tool.ino != alias.ino || tool.links != 2 || alias.links != 2 {
				t.Errorf("hardlinks: ino %d/%d links %d/%d", tool.ino, alias.ino, tool.links, alias.links)
			}
			if tool.size != 0 || alias.data != "#!/bin/sh\necho tool\n" {
				t.Errorf("hardlink data: first %d bytes, last %q", tool.size, alias.data)
			}
			if tool.mode != cpio.TypeReg|cpio.ModeSetuid|0o755 {
				t.Errorf("tool mode %o", tool.mode)
			}
			inos := map[int64]string{}
			for name, e := range got {
				if other, dup := inos[e.ino]; dup && !strings.HasPrefix(name, "usr/bin/tool") {
					t.Errorf("%s and %s share inode %d", name, other, e.ino)
				}
				inos[e.ino] = name
			}
		})
	}
}

// TestHostCpioLists checks the archive with GNU cpio, the reference reader,
// including device numbers, which cavaliergopher/cpio does not read.
func TestHostCpioLists(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("cpio missing in CI")
		}
		t.Skip("cpio not installed")
	}
	raw := encode(t, buildArchive(t, makeTree(t)), CompressionNone)
	cmd := exec.Command("cpio", "-tv", "--quiet")
	cmd.Stdin = bytes.NewReader(raw)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -tv: %v\n%s", err, out)
	}
	listing := string(out)
	for _, want := range []string{"crw-------", "5,   1", "dev/console", "-rwsr-xr-x   2 root", "usr/bin/tool-alias", "bin -> usr/bin", "etc/private/key"} {
		if !strings.Contains(listing, want) {
			t.Errorf("cpio -tv lacks %q:\n%s", want, listing)
		}
	}

	// Extracting shows the hardlink pair is one file with the data.
	dir := t.TempDir()
	cmd = exec.Command("cpio", "-idm", "--quiet", "--no-absolute-filenames")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(raw)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cpio -i: %v\n%s", err, out)
	}
	a, errA := os.Stat(filepath.Join(dir, "usr/bin/tool"))
	b, errB := os.Stat(filepath.Join(dir, "usr/bin/tool-alias"))
	if errA != nil || errB != nil || !os.SameFile(a, b) || a.Size() == 0 {
		t.Errorf("extracted hardlinks: %v %v same=%v", errA, errB, errA == nil && errB == nil && os.SameFile(a, b))
	}
}

func TestAddErrors(t *testing.T) {
	a := NewArchive()
	if err := a.AddFile("/f", 0o644, nil); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"duplicate":       a.AddFile("f", 0o644, nil),
		"parent is file":  a.AddFile("/f/g", 0o644, nil),
		"root":            a.AddDir("/", 0o755),
		"empty symlink":   a.AddSymlink("/s", ""),
		"SetOwner absent": a.SetOwner("/nope", 1, 1),
	} {
		if err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	// Dangling hardlinks are found when writing.
	if err := a.AddHardlink("/h", "/absent"); err != nil {
		t.Fatal(err)
	}
	if err := a.Encode(io.Discard, WriteOptions{}); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("dangling hardlink: %v", err)
	}
	if err := NewArchive().Encode(io.Discard, WriteOptions{}); err == nil {
		t.Error("empty archive encoded")
	}
	b := NewArchive()
	b.AddFile("/x", 0o644, nil)
	if err := b.Encode(io.Discard, WriteOptions{Compression: "lz4"}); err == nil {
		t.Error("unknown compression accepted")
	}
}

func TestExplicitDirAfterImplicit(t *testing.T) {
	a := NewArchive()
	a.AddFile("/d/f", 0o644, nil)
	if err := a.AddDir("/d", 0o700); err != nil {
		t.Fatal(err)
	}
	_, got := readBack(t, bytes.NewReader(encode(t, a, CompressionNone)))
	if got["d"].mode != cpio.TypeDir|0o700 {
		t.Errorf("d mode %o", got["d"].mode)
	}
}

// BenchmarkWrite writes a 200 MiB tree (one large image plus many small
// files) zstd-compressed, the shape of a memory-mode initrd.
func BenchmarkWrite(b *testing.B) {
	dir := b.TempDir()
	big := make([]byte, 160<<20)
	// Half random, half repetitive: like a squashfs image with some
	// compressible metadata.
	seed := uint64(1)
	for i := 0; i < len(big)/2; i += 8 {
		seed = seed*6364136223846793005 + 1442695040888963407
		for j := 0; j < 8; j++ {
			big[i+j] = byte(seed >> (8 * j))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "root.img"), big, 0o644); err != nil {
		b.Fatal(err)
	}
	small := bytes.Repeat([]byte("module data "), 4096/12)
	for i := 0; i < 10240; i++ {
		p := filepath.Join(dir, "lib", fmt.Sprintf("d%03d", i%100), fmt.Sprintf("f%05d.ko", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, small, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	a := NewArchive()
	if err := a.AddTree(dir, "/"); err != nil {
		b.Fatal(err)
	}
	for _, c := range []Compression{CompressionNone, CompressionZstd} {
		b.Run(string(c), func(b *testing.B) {
			b.SetBytes(200 << 20)
			for b.Loop() {
				if err := a.Encode(io.Discard, WriteOptions{SourceDateEpoch: testEpoch, Compression: c}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
