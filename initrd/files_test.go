package initrd

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestCollectFilesResolvesInRoot(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "usr/lib/x"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/sbin/tool"), []byte("x"), 0o755))
	must(os.WriteFile(filepath.Join(root, "usr/lib/x/real.so"), []byte("x"), 0o644))
	must(os.Symlink("usr/sbin", filepath.Join(root, "sbin")))                       // relative
	must(os.Symlink("/usr/lib", filepath.Join(root, "lib")))                        // absolute: inside root
	must(os.Symlink("../../../../real.so", filepath.Join(root, "usr/lib/x/up.so"))) // ".." stops at root
	must(os.Symlink("x/real.so", filepath.Join(root, "usr/lib/link.so")))
	// Not ELF: each resolves to itself, inside the root.
	r := openRoot(t, root)
	if _, err := collectFiles(r, []string{"/sbin/tool", "/lib/x/real.so", "/lib/link.so"}); err != nil {
		t.Error(err)
	}
	must(os.WriteFile(filepath.Join(filepath.Dir(root), "real.so"), []byte("host"), 0o644))
	if _, err := collectFiles(r, []string{"/lib/x/up.so"}); err == nil {
		t.Error("a link climbing out of the root resolved to a host file")
	}
}

// TestCollectFilesMke2fs copies mke2fs with its libraries from the host's
// root (Debian, like the images) and checks the loader and libc come along.
func TestCollectFilesMke2fs(t *testing.T) {
	if _, err := os.Stat("/sbin/mke2fs"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("mke2fs missing: %v", err)
		}
		t.Skip("no /sbin/mke2fs on this host")
	}
	files, err := collectFiles(openRoot(t, "/"), []string{"/sbin/mke2fs", "/etc/mke2fs.conf"})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range files {
		paths = append(paths, f.initrdPath)
	}
	all := strings.Join(paths, " ")
	for _, want := range []string{"/sbin/mke2fs", "/etc/mke2fs.conf", "libext2fs.so.2", "libc.so.6", "ld-linux"} {
		if !strings.Contains(all, want) {
			t.Errorf("files %s lack %s", all, want)
		}
	}
	out, err := exec.Command("ldd", "/sbin/mke2fs").Output()
	if err == nil {
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && strings.Contains(f[0], ".so") && !strings.Contains(f[0], "vdso") && !strings.Contains(all, filepath.Base(f[0])) {
				t.Errorf("ldd lists %s, collectFiles does not", f[0])
			}
		}
	}
}

// TestCollectFilesHugeInterpreter: an ELF header from the tree claiming a
// 1 TiB interpreter path is refused before anything is allocated for it.
func TestCollectFilesHugeInterpreter(t *testing.T) {
	data, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Skip("no /usr/bin/true on this host")
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil || f.Class != elf.ELFCLASS64 {
		t.Skipf("/usr/bin/true: %v", err)
	}
	phoff := binary.LittleEndian.Uint64(data[0x20:])
	phentsize := uint64(binary.LittleEndian.Uint16(data[0x36:]))
	patched := false
	for i, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			binary.LittleEndian.PutUint64(data[phoff+uint64(i)*phentsize+32:], 1<<40) // p_filesz
			patched = true
		}
	}
	if !patched {
		t.Skip("/usr/bin/true has no interpreter")
	}
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "tool"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = collectFiles(openRoot(t, root), []string{"/tool"})
	if err == nil || !strings.Contains(err.Error(), "interpreter path of 1099511627776 bytes") {
		t.Fatalf("err = %v", err)
	}
}
