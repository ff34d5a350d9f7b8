package rootfs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/hostarch"
	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/programs"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/recipe"
)

// miniTree makes a tree that can run sh, rm, ln, find, stat, touch and
// dpkg-query under
// chroot, with the host's binaries and their libraries, laid out like a
// merged-/usr Debian tree.
func miniTree(t *testing.T, root string) {
	t.Helper()
	buildertest.RequireTools(t, "chroot", "ldd", "dpkg-query")
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "usr/lib64", "var/lib", "tmp"} {
		buildertest.Must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
	}
	for _, l := range [][2]string{{"usr/bin", "bin"}, {"usr/sbin", "sbin"}, {"usr/lib", "lib"}, {"usr/lib64", "lib64"}} {
		buildertest.Must(t, os.Symlink(l[0], filepath.Join(root, l[1])))
	}
	copyHost := func(p string) {
		b, err := os.ReadFile(p)
		buildertest.Must(t, err)
		dst := filepath.Join(root, p)
		buildertest.Must(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		buildertest.Must(t, os.WriteFile(dst, b, 0o755))
	}
	for _, tool := range []string{"sh", "rm", "ln", "true", "dpkg-query", "find", "stat", "touch"} {
		p, err := exec.LookPath(tool)
		buildertest.Must(t, err)
		copyHost("/usr/bin/" + filepath.Base(p))
		out, err := exec.Command("ldd", p).Output()
		buildertest.Must(t, err)
		for _, line := range strings.Split(string(out), "\n") {
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					real, err := filepath.EvalSymlinks(f)
					buildertest.Must(t, err)
					copyHost(real)
					if real != f {
						buildertest.Must(t, os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755))
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
	buildertest.Must(t, os.RemoveAll(filepath.Join(h.root, "boot")))
	for _, l := range []string{"var/log", "var/lib/apt/lists", "boot", "var/lib/dpkg"} {
		buildertest.Must(t, os.MkdirAll(filepath.Join(h.root, filepath.Dir(l)), 0o755))
		buildertest.Must(t, os.Symlink(outside, filepath.Join(h.root, l)))
	}
	// Inside the tree, the link's target holds the image's own files.
	inside := filepath.Join(h.root, outside)
	buildertest.Must(t, os.MkdirAll(inside, 0o755))
	buildertest.Must(t, os.WriteFile(filepath.Join(inside, "image.log"), nil, 0o644))
	buildertest.Must(t, os.WriteFile(filepath.Join(inside, "initrd.img-6.1"), nil, 0o644))
	buildertest.Must(t, os.WriteFile(filepath.Join(inside, "status"), []byte(dpkgStatus("inside-image")), 0o644))
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
	buildertest.Must(t, os.MkdirAll(filepath.Join(root, "etc/dpkg/dpkg.cfg.d"), 0o755))
	files := []string{
		"usr/share/doc/foo/copyright", "usr/share/doc/foo/changelog.gz", "usr/share/doc/foo/examples/a.txt",
		"usr/share/doc/baz/sub/copyright", "usr/share/doc/README",
		"usr/share/man/man1/ls.1.gz", "usr/share/info/dir",
		"usr/share/locale/locale.alias", "usr/share/locale/de/LC_MESSAGES/x.mo",
		"usr/share/other/keep", "usr/share/doc-base/keep",
	}
	for _, f := range files {
		buildertest.Must(t, os.MkdirAll(filepath.Join(root, filepath.Dir(f)), 0o755))
		buildertest.Must(t, os.WriteFile(filepath.Join(root, f), []byte(f), 0o644))
	}
	buildertest.Must(t, os.MkdirAll(filepath.Join(root, "usr/share/doc/empty/dir"), 0o755))
	buildertest.Must(t, os.Symlink("foo", filepath.Join(root, "usr/share/doc/bar")))
	old := time.Unix(1600000000, 0)
	buildertest.Must(t, os.Chtimes(filepath.Join(root, "usr/share/locale"), old, old))
	if out, err := exec.Command("sh", "-c", dpkgFilterHook(dpkgFilter), "exec", root).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got []string
	buildertest.Must(t, filepath.WalkDir(filepath.Join(root, "usr/share"), func(p string, d os.DirEntry, err error) error {
		buildertest.Must(t, err)
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
			buildertest.Must(t, os.MkdirAll(filepath.Join(tree, "etc"), 0o755))
			if tc.passwd != "" {
				buildertest.Must(t, os.WriteFile(filepath.Join(tree, "etc/passwd"), []byte(tc.passwd), 0o644))
			}
			for _, d := range aptPartialDirs {
				p := filepath.Join(tree, d)
				buildertest.Must(t, os.MkdirAll(filepath.Dir(p), 0o755))
				if tc.symlink {
					buildertest.Must(t, os.Symlink(outside, p))
				} else {
					buildertest.Must(t, os.Mkdir(p, 0o700))
				}
			}
			root, err := fsroot.Open(tree)
			buildertest.Must(t, err)
			defer root.Close()
			buildertest.Must(t, sandboxAptPartial(root))
			owner := func(p string) int {
				fi, err := os.Lstat(p)
				buildertest.Must(t, err)
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

// TestDpkgCounter follows mmdebstrap --verbose through the shape of a real
// bootstrap's apt and dpkg lines: apt downloads every package, dpkg
// unpacks and configures the essential set, a second apt run the rest.
func TestDpkgCounter(t *testing.T) {
	steps := []struct {
		line        string
		done, total int64
	}{
		{"Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]", 0, 0},
		{"0 upgraded, 5 newly installed, 0 to remove and 0 not upgraded.", 0, 5},
		{"Get:1 http://deb.debian.org/debian bookworm/main amd64 libc6 amd64 2.36-9 [2757 kB]", 0, 5},
		{"Get:2 http://deb.debian.org/debian bookworm/main amd64 base-files amd64 12.4 [70.8 kB]", 0, 5},
		{"Get:3 http://deb.debian.org/debian bookworm/main amd64 dpkg amd64 1.21.22 [1554 kB]", 1, 5},
		{"Get:4 http://deb.debian.org/debian bookworm/main amd64 kmod amd64 30 [93 kB]", 1, 5},
		{"Get:5 http://deb.debian.org/debian bookworm/main amd64 udev amd64 252 [1700 kB]", 1, 5},
		{"Unpacking libc6:amd64 (2.36-9) ...", 2, 5},
		{"Unpacking base-files (12.4) ...", 2, 5},
		{"Unpacking dpkg (1.21.22) ...", 2, 5},
		{"Setting up libc6:amd64 (2.36-9) ...", 3, 5},
		{"Setting up base-files (12.4) ...", 3, 5},
		{"Setting up dpkg (1.21.22) ...", 3, 5},
		{"0 upgraded, 2 newly installed, 0 to remove and 0 not upgraded.", 3, 5},
		{"Unpacking kmod (30) ...", 4, 5},
		{"Setting up kmod (30) ...", 4, 5},
		{"Unpacking udev (252) ...", 4, 5},
		{"Setting up udev (252) ...", 5, 5},
	}
	var c dpkgCounter
	var done, total int64
	for _, s := range steps {
		c.count(s.line, &done, &total)
		if done != s.done || total != s.total {
			t.Errorf("after %q: %d of %d, want %d of %d", s.line, done, total, s.done, s.total)
		}
	}
}

// FuzzDpkgProgress: mmdebstrap's output is outside bytes; whatever it
// prints, progress never runs past its total nor backwards.
func FuzzDpkgProgress(f *testing.F) {
	f.Add([]byte("0 upgraded, 2 newly installed, 0 to remove\nGet:1 x\nUnpacking a\nSetting up a\nSetting up b\nSetting up c\n"))
	f.Add([]byte("99999999999999999999 upgraded, 99999999999999999999 newly installed\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &dpkgCounter{}
		var done, total int64
		lc := progress.NewLineCounter(context.Background(), "packages", func(line string, d, tot *int64) {
			c.count(line, d, tot)
			done, total = *d, *tot
		})
		var last int64
		for chunk := range slices.Chunk(data, 7) {
			lc.Write(chunk)
			if done < last || (total > 0 && done > total) || done < 0 {
				t.Fatalf("progress %d of %d after %d", done, total, last)
			}
			last = done
		}
	})
}

// BenchmarkBootstrap runs the bootstrap step for the test recipe's package
// set side by side: every .deb downloaded (an empty deb pool) and every
// .deb from the pool the first run filled (the step ends with its base
// layer image squashed, image-MiB). Run with -benchtime 1x (`make bench`).
func BenchmarkBootstrap(b *testing.B) {
	buildertest.RequireTools(b, "mmdebstrap")
	r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(b), "recipes/test.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	pkgs := PackageSet(r)
	var pool *debPool
	var last string
	bootstrap := func(b *testing.B, p *debPool) time.Duration {
		out := b.TempDir()
		s := &bootstrapStep{r: r, packages: pkgs, epoch: buildertest.Epoch, debs: p, work: b.TempDir(), logf: b.Logf}
		start := time.Now()
		if err := s.Run(context.Background(), out); err != nil {
			b.Fatal(err)
		}
		last = out
		return time.Since(start)
	}
	var cold, warm time.Duration
	b.Run("download-all", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			pool = newDebPool(b.TempDir(), r.Base.Mirror, r.Base.Release)
			cold = bootstrap(b, pool)
		}
		b.StopTimer()
		if fi, err := os.Stat(filepath.Join(last, step.LayerImage)); err == nil {
			b.ReportMetric(float64(fi.Size())/(1<<20), "image-MiB")
		}
	})
	b.Run("pool", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			warm = bootstrap(b, pool)
		}
	})
	if cold > 0 && warm > 0 {
		b.Logf("bootstrap: every .deb downloaded %.1fs, .debs from the pool %.1fs (%.3f)", cold.Seconds(), warm.Seconds(), warm.Seconds()/cold.Seconds())
	}
}

// BenchmarkForeignBootstrap bootstraps the multi-architecture test recipe for the architecture
// this host emulates (arm64 on amd64, amd64 on arm64) side by side: every
// tool the tree's own, run under qemu-user, and dpkg-deb and dpkg-split
// native (cmd/nativedpkg). The .debs come from the cache's pool (make
// test-image fills it), so both time the install, not the mirror. Both give
// the same base layer, byte for byte, or the benchmark fails.
func BenchmarkForeignBootstrap(b *testing.B) {
	buildertest.RequireTools(b, "mmdebstrap")
	arch := "arm64"
	if runtime.GOARCH == "arm64" {
		arch = "amd64"
	}
	if err := hostarch.Check(arch); err != nil {
		b.Fatal(err)
	}
	r, err := recipe.Load(filepath.Join(buildertest.RepoRoot(b), "recipes/test-multiarch.yaml"))
	if err != nil {
		b.Fatal(err)
	}
	if r, err = r.ForArchitecture(arch); err != nil {
		b.Fatal(err)
	}
	native := filepath.Join(b.TempDir(), "nativedpkg")
	if err := programs.BuildProgram(context.Background(), programs.NativeDpkgProgram, native, runtime.GOARCH); err != nil {
		b.Fatal(err)
	}
	cacheDir := cache.DefaultDir()
	work, err := os.MkdirTemp(cacheDir, "bench-") // on the pool's file system
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(work) })
	images := map[string]string{}
	took := map[string]time.Duration{}
	for _, mode := range []string{"emulated", "native"} {
		b.Run(mode, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				out, err := os.MkdirTemp(work, mode+"-")
				if err != nil {
					b.Fatal(err)
				}
				var nd NativeDpkg
				if mode == "native" {
					nd = func(_ context.Context, p string) error { return os.Link(native, p) }
				}
				s := NewBootstrap(r, PackageSet(r), buildertest.Epoch, work, cacheDir, nd, b.Logf)
				start := time.Now()
				if err := s.Run(context.Background(), out); err != nil {
					b.Fatal(err)
				}
				took[mode] = time.Since(start)
				images[mode] = testutil.FileSHA256(b, filepath.Join(out, step.LayerImage))
			}
		})
	}
	if images["emulated"] != images["native"] {
		b.Fatalf("%s base layer: emulated dpkg-deb gives sha256 %s, native %s", arch, images["emulated"], images["native"])
	}
	if e, n := took["emulated"], took["native"]; e > 0 && n > 0 {
		b.Logf("%s bootstrap: emulated dpkg-deb %.1fs, native %.1fs (%.2f); same base layer", arch, e.Seconds(), n.Seconds(), n.Seconds()/e.Seconds())
	}
}
