package builder

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// miniTree makes a tree that can run sh, rm, ln, find, stat, touch and
// dpkg-query under
// chroot, with the host's binaries and their libraries, laid out like a
// merged-/usr Debian tree.
func miniTree(t *testing.T, root string) {
	t.Helper()
	requireTools(t, "chroot", "ldd", "dpkg-query")
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "var/lib", "tmp"} {
		mustDo(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for _, l := range [][2]string{{"usr/bin", "bin"}, {"usr/sbin", "sbin"}, {"usr/lib", "lib"}, {"usr/lib64", "lib64"}} {
		mustDo(t, os.Symlink(l[0], filepath.Join(root, l[1])))
	}
	copyHost := func(p string) {
		b, err := os.ReadFile(p)
		mustDo(t, err)
		dst := filepath.Join(root, p)
		mustDo(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		mustDo(t, os.WriteFile(dst, b, 0o755))
	}
	for _, tool := range []string{"sh", "rm", "ln", "true", "dpkg-query", "find", "stat", "touch"} {
		p, err := exec.LookPath(tool)
		mustDo(t, err)
		copyHost("/usr/bin/" + filepath.Base(p))
		out, err := exec.Command("ldd", p).Output()
		mustDo(t, err)
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					real, err := filepath.EvalSymlinks(f)
					mustDo(t, err)
					copyHost(real)
					if real != f {
						mustDo(t, os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755))
						os.Symlink(real, filepath.Join(root, f))
					}
				}
			}
		}
	}
}

func dpkgStatus(pkg string) string {
	return "Package: " + pkg + "\nStatus: install ok installed\nVersion: 1.0\nArchitecture: all\nMaintainer: x\nDescription: x\n\n"
}

// TestBootstrapHooksStayInsideTree runs the bootstrap's customize hooks
// the way mmdebstrap does (sh -c HOOK exec ROOT) on a tree whose /var/log,
// /var/lib/apt/lists, /boot and /var/lib/dpkg are absolute links to host
// directories: the host's files stay, the package list is the tree's.
func TestBootstrapHooksStayInsideTree(t *testing.T) {
	h := newHostTree(t)
	miniTree(t, h.root)
	outside := filepath.Dir(h.sentinel)
	h.hostFile(t, "syslog.log", "host log")
	h.hostFile(t, "initrd.img-6.1", "host initrd")
	h.hostFile(t, "status", dpkgStatus("host-package"))
	mustDo(t, os.RemoveAll(filepath.Join(h.root, "boot")))
	for _, l := range []string{"var/log", "var/lib/apt/lists", "boot", "var/lib/dpkg"} {
		mustDo(t, os.MkdirAll(filepath.Join(h.root, filepath.Dir(l)), 0o755))
		mustDo(t, os.Symlink(outside, filepath.Join(h.root, l)))
	}
	// Inside the tree, the link's target holds the image's own files.
	inside := filepath.Join(h.root, outside)
	mustDo(t, os.MkdirAll(inside, 0o755))
	mustDo(t, os.WriteFile(filepath.Join(inside, "image.log"), nil, 0o644))
	mustDo(t, os.WriteFile(filepath.Join(inside, "initrd.img-6.1"), nil, 0o644))
	mustDo(t, os.WriteFile(filepath.Join(inside, "status"), []byte(dpkgStatus("inside-image")), 0o644))
	list := filepath.Join(t.TempDir(), "packages")
	for _, hook := range []string{packagesHook(list), cleanupHook} { // the links share a directory: list first
		if out, err := exec.Command("sh", "-c", hook, "exec", h.root).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", hook, err, out)
		}
	}
	for _, f := range []string{"image.log", "initrd.img-6.1"} {
		if _, err := os.Lstat(filepath.Join(inside, f)); err == nil {
			t.Errorf("the image's %s was not removed", f)
		}
	}
	if b, err := os.ReadFile(list); err != nil || string(b) != "inside-image\t1.0\n" {
		t.Errorf("package list = %q, %v; want the tree's", b, err)
	}
	h.untouched(t)
}

// TestDpkgFilterHook runs the extract hook on a tree as the unfiltered
// extract phase leaves it: what remains is what dpkg's path-exclude and
// path-include rules keep (a * matches / too; a directory stays only for a
// kept file), and dpkg gets the same options for the packages it installs.
func TestDpkgFilterHook(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	miniTree(t, root)
	mustDo(t, os.MkdirAll(filepath.Join(root, "etc/dpkg/dpkg.cfg.d"), 0o755))
	files := []string{
		"usr/share/doc/foo/copyright", "usr/share/doc/foo/changelog.gz", "usr/share/doc/foo/examples/a.txt",
		"usr/share/doc/baz/sub/copyright", "usr/share/doc/README",
		"usr/share/man/man1/ls.1.gz", "usr/share/info/dir",
		"usr/share/locale/locale.alias", "usr/share/locale/de/LC_MESSAGES/x.mo",
		"usr/share/other/keep", "usr/share/doc-base/keep",
	}
	for _, f := range files {
		mustDo(t, os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755))
		mustDo(t, os.WriteFile(filepath.Join(root, f), []byte(f), 0o644))
	}
	mustDo(t, os.MkdirAll(filepath.Join(root, "usr/share/doc/empty/dir"), 0o755))
	mustDo(t, os.Symlink("foo", filepath.Join(root, "usr/share/doc/bar")))
	old := time.Unix(1600000000, 0)
	mustDo(t, os.Chtimes(filepath.Join(root, "usr/share/locale"), old, old))
	if out, err := exec.Command("sh", "-c", dpkgFilterHook, "exec", root).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got []string
	mustDo(t, filepath.WalkDir(filepath.Join(root, "usr/share"), func(p string, d os.DirEntry, err error) error {
		mustDo(t, err)
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			rel += "/"
		}
		got = append(got, rel)
		return nil
	}))
	want := []string{
		"usr/share/", "usr/share/doc/", "usr/share/doc-base/", "usr/share/doc-base/keep",
		"usr/share/doc/baz/", "usr/share/doc/baz/sub/", "usr/share/doc/baz/sub/copyright",
		"usr/share/doc/foo/", "usr/share/doc/foo/copyright",
		"usr/share/info/", "usr/share/locale/", "usr/share/locale/locale.alias",
		"usr/share/man/", "usr/share/other/", "usr/share/other/keep",
	}
	sort.Strings(got)
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kept:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/share/locale")); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("usr/share/locale lost its mtime: %v, %v", fi.ModTime(), err)
	}
	b, err := os.ReadFile(filepath.Join(root, "etc/dpkg/dpkg.cfg.d/99mmdebstrap"))
	if err != nil || string(b) != strings.Join(dpkgFilter, "\n")+"\n" {
		t.Errorf("dpkg options = %q, %v", b, err)
	}
}

// TestSandboxAptPartial: the partial directories go to the tree's _apt (by
// the tree's /etc/passwd, not the host's); a symlink in their place is not
// followed.
func TestSandboxAptPartial(t *testing.T) {
	for _, tc := range []struct {
		name    string
		passwd  string
		symlink bool
		want    int // owner of the partial directories
	}{
		{"apt", "root:x:0:0::/root:/bin/sh\n_apt:x:4242:65534::/nonexistent:/usr/sbin/nologin\n", false, 4242},
		{"no _apt", "root:x:0:0::/root:/bin/sh\n", false, 0},
		{"no passwd", "", false, 0},
		{"symlinked partial", "_apt:x:4242:65534::/nonexistent:/usr/sbin/nologin\n", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := t.TempDir()
			outside := t.TempDir()
			mustDo(t, os.MkdirAll(filepath.Join(tree, "etc"), 0o755))
			if tc.passwd != "" {
				mustDo(t, os.WriteFile(filepath.Join(tree, "etc/passwd"), []byte(tc.passwd), 0o644))
			}
			for _, d := range aptPartialDirs {
				p := filepath.Join(tree, d)
				mustDo(t, os.MkdirAll(filepath.Dir(p), 0o755))
				if tc.symlink {
					mustDo(t, os.Symlink(outside, p))
				} else {
					mustDo(t, os.Mkdir(p, 0o700))
				}
			}
			root, err := fsroot.Open(tree)
			mustDo(t, err)
			defer root.Close()
			mustDo(t, sandboxAptPartial(root))
			owner := func(p string) int {
				fi, err := os.Lstat(p)
				mustDo(t, err)
				return int(fi.Sys().(*syscall.Stat_t).Uid)
			}
			for _, d := range aptPartialDirs {
				if got := owner(filepath.Join(tree, d)); got != tc.want {
					t.Errorf("%s: owner %d, want %d", d, got, tc.want)
				}
			}
			if got := owner(outside); got != 0 {
				t.Errorf("the symlinks' target outside the tree: owner %d, want 0", got)
			}
		})
	}
}
