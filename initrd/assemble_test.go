package initrd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ironcore-dev/os-builder/initrd/layout"
)

func TestAssemble(t *testing.T) {
	root := fakeModules(t)
	dir := t.TempDir()
	initBin := filepath.Join(dir, "init-binary")
	os.WriteFile(initBin, []byte("\x7fELF init"), 0o755)
	img := filepath.Join(dir, "root.squashfs")
	os.WriteFile(img, []byte("hsqs root image"), 0o644)

	opts := AssembleOptions{
		Output: filepath.Join(dir, "initrd.img"), InitBinary: initBin, RootFS: root,
		Modules: MemoryModeModules, ExtraModules: []string{"fs-ext4"}, RootImage: img,
		SourceDateEpoch: testEpoch,
	}
	if err := Assemble(opts); err != nil {
		t.Fatal(err)
	}
	first, err := os.ReadFile(opts.Output)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(first, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		t.Fatalf("not zstd: % x", first[:4])
	}
	if err := Assemble(opts); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(opts.Output)
	if !bytes.Equal(first, second) {
		t.Error("two assemblies differ")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("temporary files left behind: %v", ents)
	}

	d, err := zstd.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_, got := readBack(t, d)
	if got["init"].data != "\x7fELF init" || got["init"].mode.Perm() != 0o755 {
		t.Errorf("init: %+v", got["init"])
	}
	if got["root.img"].data != "hsqs root image" {
		t.Errorf("root.img: %+v", got["root.img"])
	}
	if _, ok := got["dev/console"]; !ok {
		t.Error("no dev/console")
	}
	for _, d := range []string{"proc", "sys", "run", "sysroot"} {
		if !got[d].mode.IsDir() {
			t.Errorf("%s missing", d)
		}
	}
	sq := got["lib/modules/6.1.0-test/kernel/fs/squashfs/squashfs.ko"]
	if sq.data != "ELF squashfs" {
		t.Errorf("squashfs.ko not decompressed: %q", sq.data)
	}
	list := got[strings.TrimPrefix(layout.ModuleListPath, "/")].data
	wantOrder := []string{"loop.ko", "squashfs.ko", "overlay.ko", "crc32c_generic.ko", "crc16.ko", "mbcache.ko", "jbd2.ko", "ext4.ko"}
	var gotOrder []string
	for _, l := range strings.Split(list, "\n") {
		if strings.HasPrefix(l, "/lib/modules/6.1.0-test/") {
			gotOrder = append(gotOrder, filepath.Base(l))
			if _, ok := got[strings.TrimPrefix(l, "/")]; !ok {
				t.Errorf("listed module %s not in the archive", l)
			}
		}
	}
	if strings.Join(gotOrder, " ") != strings.Join(wantOrder, " ") {
		t.Errorf("module order %v, want %v", gotOrder, wantOrder)
	}

	// A missing module fails and leaves no output behind.
	opts.Output = filepath.Join(dir, "bad.img")
	opts.ExtraModules = []string{"no_such_module"}
	if err := Assemble(opts); err == nil || !strings.Contains(err.Error(), "no_such_module") {
		t.Errorf("missing module: %v", err)
	}
	if _, err := os.Stat(opts.Output); err == nil {
		t.Error("failed Assemble left an output")
	}
}
