package initrd

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// fakeModules writes a depmod-like directory for kernel "6.1.0-test" into a
// merged-/usr root and returns the root.
func fakeModules(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "usr/lib/modules/6.1.0-test")
	files := map[string]string{
		"modules.dep": strings.Join([]string{
			"kernel/fs/overlayfs/overlay.ko:",
			"kernel/drivers/block/loop.ko:",
			"kernel/fs/squashfs/squashfs.ko.xz:",
			"kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko",
			"kernel/fs/jbd2/jbd2.ko:",
			"kernel/fs/mbcache.ko:",
			"kernel/lib/crc16.ko:",
			"kernel/crypto/crc32c_generic.ko.zst:",
			"kernel/drivers/scsi/sd_mod.ko: kernel/lib/crc-t10dif.ko kernel/drivers/scsi/scsi_mod.ko",
			"kernel/drivers/scsi/scsi_mod.ko:",
			"kernel/lib/crc-t10dif.ko:",
		}, "\n") + "\n",
		"modules.builtin": "kernel/drivers/virtio/virtio.ko\n",
		"modules.alias": "# Aliases extracted from modules themselves.\n" +
			"alias fs-ext4 ext4\nalias crypto-crc32c crc32c_generic\nalias crypto-crc32c crc32c_intel\n" +
			"alias pci:v00001AF4d00001001sv*sd*bc*sc*i* virtio_blk\n",
		"modules.softdep": "# Soft dependencies extracted from modules themselves.\nsoftdep ext4 pre: crypto-crc32c\nsoftdep sd_mod post: absent_module\n",
	}
	for name, content := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, line := range strings.Split(files["modules.dep"], "\n") {
		rel, _, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		p := filepath.Join(dir, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		data := []byte("ELF " + moduleName(rel))
		switch {
		case strings.HasSuffix(rel, ".xz"):
			var b bytes.Buffer
			w, _ := xz.NewWriter(&b)
			w.Write(data)
			w.Close()
			data = b.Bytes()
		case strings.HasSuffix(rel, ".zst"):
			e, _ := zstd.NewWriter(nil)
			data = e.EncodeAll(data, nil)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// openRoot opens dir as a tree whose symlinks resolve inside it.
func openRoot(t testing.TB, dir string) *fsroot.Root {
	t.Helper()
	r, err := fsroot.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestResolveModules(t *testing.T) {
	root := openRoot(t, fakeModules(t))
	for _, tc := range []struct {
		names   []string
		want    []string
		wantErr string
	}{
		{names: []string{"loop", "squashfs", "overlay"},
			want: []string{"kernel/drivers/block/loop.ko", "kernel/fs/squashfs/squashfs.ko.xz", "kernel/fs/overlayfs/overlay.ko"}},
		// Dependencies first, soft pre-dependencies (through an alias,
		// whose unknown second target is skipped) before those.
		{names: []string{"fs-ext4"},
			want: []string{"kernel/crypto/crc32c_generic.ko.zst", "kernel/lib/crc16.ko", "kernel/fs/mbcache.ko", "kernel/fs/jbd2/jbd2.ko", "kernel/fs/ext4/ext4.ko"}},
		// '-' and '_' are the same; each file once; builtins need nothing.
		{names: []string{"sd-mod", "crc_t10dif", "virtio", "sd_mod"},
			want: []string{"kernel/lib/crc-t10dif.ko", "kernel/drivers/scsi/scsi_mod.ko", "kernel/drivers/scsi/sd_mod.ko"}},
		{names: []string{"loop", "nosuch", "virtio_blk"}, wantErr: "nosuch, virtio_blk"},
	} {
		t.Run(strings.Join(tc.names, ","), func(t *testing.T) {
			got, err := ResolveModules(root, "6.1.0-test", tc.names)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to name %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
	if _, err := ResolveModules(root, "9.9.9", []string{"loop"}); err == nil || !strings.Contains(err.Error(), "9.9.9") {
		t.Errorf("unknown kernel: %v", err)
	}
	rels, err := KernelReleases(root)
	if err != nil || !slices.Equal(rels, []string{"6.1.0-test"}) {
		t.Errorf("KernelReleases = %v, %v", rels, err)
	}
}

func TestReadModuleDecompresses(t *testing.T) {
	root := openRoot(t, fakeModules(t))
	dir, err := ModulesDir(root, "6.1.0-test")
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{
		"kernel/fs/squashfs/squashfs.ko.xz":   "ELF squashfs",
		"kernel/crypto/crc32c_generic.ko.zst": "ELF crc32c_generic",
	} {
		dst, data, err := readModule(root, dir, rel)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(dst, ".ko") || string(data) != want {
			t.Errorf("%s -> %s %q", rel, dst, data)
		}
	}
	if dst, data, err := readModule(root, dir, "kernel/drivers/block/loop.ko"); err != nil || string(data) != "ELF loop" || dst != "kernel/drivers/block/loop.ko" {
		t.Errorf("plain module: %s %q %v", dst, data, err)
	}
}

// TestDefaultModulesResolveOnRealRootfs checks DefaultModules against a
// real Debian tree when one is given (OSB_TEST_ROOTFS). It is a developer's
// shortcut and skips without it, even in CI: there the builder resolves the
// same list for every initrd it builds, and the boots of its output (builder
// tests, initrd/pid1's OSB_TEST_OUTPUT tests) prove the modules load.
func TestDefaultModulesResolveOnRealRootfs(t *testing.T) {
	rootfs := os.Getenv("OSB_TEST_ROOTFS")
	if rootfs == "" {
		t.Skip("OSB_TEST_ROOTFS not set (developer-only; CI covers this through the builder's output)")
	}
	root := openRoot(t, rootfs)
	rels, err := KernelReleases(root)
	if err != nil {
		t.Fatal(err)
	}
	files, err := ResolveModules(root, rels[len(rels)-1], DefaultModules)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d module files: %v", len(files), files)
	idx := func(name string) int {
		return slices.IndexFunc(files, func(f string) bool { return moduleName(f) == name })
	}
	if i, j := idx("scsi_mod"), idx("sd_mod"); i < 0 || j < 0 || i > j {
		t.Errorf("scsi_mod (%d) must precede sd_mod (%d)", i, j)
	}
}
