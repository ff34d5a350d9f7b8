package rootfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/recipe"
)

// bootstrapVersion changes whenever the bootstrap step's behaviour changes,
// so old cache entries stop matching.
const bootstrapVersion = "7"

// bootstrapStep installs the base and every layer's Debian packages with
// mmdebstrap into a directory and squashes it, less machine state, as the
// root's base layer. Straight from the tree: a tarball in between (written
// by mmdebstrap, sealed, unpacked again) cost as much as a third of the
// bootstrap it carried (BenchmarkBootstrap). Its key is the requested package set, not the
// versions apt resolves: like mkosi's cache, an entry stays valid until the
// set changes or it is pruned (`builder cache prune`, `--no-cache`); the
// versions it got are recorded in the output manifest.
type bootstrapStep struct {
	r        *recipe.Recipe
	packages []string
	epoch    int64
	// debs, when set, hands the .debs of earlier bootstraps to mmdebstrap
	// and keeps the ones it downloads; work holds the step's staging
	// directories (on the pool's file system, see Build); logf reports
	// what the pool recovers from.
	debs *debPool
	work string
	logf func(string, ...any)
	// native, when set, writes cmd/nativedpkg for this host: the tree is
	// another architecture's, and dpkg runs under qemu-user.
	native NativeDpkg
}

// NativeDpkg writes the host's static dpkg-deb and dpkg-split
// (cmd/nativedpkg) to path.
type NativeDpkg func(ctx context.Context, path string) error

// NewBootstrap is the step that installs packages, r's base and the rest
// of its package set, into a tree and squashes it as the root's base
// layer. With a cacheDir it keeps the .debs it downloads in the cache's
// pool for the next bootstrap (and work must be on the cache's file
// system); logf reports what the pool recovers from. native, for a tree of
// another architecture than the host's, supplies the dpkg-deb that dpkg
// runs natively (see nativeDpkgHooks); nil runs the tree's own.
func NewBootstrap(r *recipe.Recipe, packages []string, epoch int64, work, cacheDir string, native NativeDpkg, logf func(string, ...any)) step.Step {
	s := &bootstrapStep{r: r, packages: packages, epoch: epoch, work: work, logf: logf, native: native}
	if cacheDir != "" {
		s.debs = newDebPool(cacheDir, r.Base.Mirror, r.Base.Release)
	}
	return s
}

// BaseLayer is the base layer in the bootstrap step's output out.
func BaseLayer(out string) step.Layer { return step.Layer{Dir: out, Name: step.BaseLayer} }

// PackageList is the list of the packages installed, in the bootstrap
// step's output out (step.PackagesList).
func PackageList(out string) string { return filepath.Join(out, step.PackagesList) }

// PackageSet is the packages the bootstrap installs for r: the recipe's,
// and what the init and r's outputs need from the image itself.
func PackageSet(r *recipe.Recipe) []string {
	// The init formats the data partition for persisted paths with the
	// image's own mke2fs.
	pkgs := append(r.Packages(), "e2fsprogs")
	if r.OutputSet().NeedsStub() {
		pkgs = append(pkgs, "systemd-boot-efi")
	}
	sort.Strings(pkgs)
	return slices.Compact(pkgs)
}

func (s *bootstrapStep) Name() string { return "bootstrap" }

func (s *bootstrapStep) Inputs() (cache.Inputs, error) {
	b := s.r.Base
	var in cache.Inputs
	in.Add("step-version", bootstrapVersion)
	in.Add("distribution", b.Distribution+"/"+b.Release+"/"+b.Architecture)
	in.Add("mirror", b.Mirror)
	in.Add("components", strings.Join(b.Components, ","))
	in.Add("packages", strings.Join(s.packages, "\n"))
	in.Add("source-date-epoch", strconv.FormatInt(s.epoch, 10))
	// Only when set: a recipe that prunes nothing keeps its cache entries.
	for _, f := range []struct {
		name string
		pats []string
	}{{"prune-exclude", s.r.PruneExclude()}, {"prune-include", s.r.PruneInclude()}, {"prune-remove", s.r.PruneRemove()}} {
		if len(f.pats) > 0 {
			in.Add(f.name, strings.Join(f.pats, "\n"))
		}
	}
	return in, nil
}

// The builder makes its own initrd, so initramfs-tools' hooks must never run
// inside the image (each run costs minutes): divert update-initramfs to
// true(1) before any package is installed.
const noInitramfsHook = `chroot "$1" dpkg-divert --quiet --local --rename --divert /usr/sbin/update-initramfs.osb-distrib --add /usr/sbin/update-initramfs && chroot "$1" ln -sf /bin/true /usr/sbin/update-initramfs`

// cleanupHook and packagesHook run inside the tree (chroot), so the tree's
// own symlinks (/var/log -> /somewhere) resolve inside it: "$1"/var/log/...
// on the host would follow an absolute link to the host's files.
const cleanupHook = `chroot "$1" sh -c 'rm -f /boot/initrd.img* /initrd.img* && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /var/log/apt/*'`

// dpkgFilter keeps documentation and translations, dead weight on a node,
// out of the tree.
var dpkgFilter = []string{
	"path-exclude=/usr/share/doc/*",
	"path-include=/usr/share/doc/*/copyright",
	"path-exclude=/usr/share/man/*",
	"path-exclude=/usr/share/info/*",
	"path-exclude=/usr/share/locale/*",
	"path-include=/usr/share/locale/locale.alias",
}

// dpkgFilterHook applies opts (dpkgFilter, and a recipe's prune patterns) from the extract hook on, instead of
// mmdebstrap's --dpkgopt: given --dpkgopt, mmdebstrap pipes every essential
// package's extraction through mmtarfilter, a Python process per package
// that re-parses the whole archive, which costs more than the rest of the
// extract phase (BenchmarkBootstrap). Here the essential packages are
// extracted whole, then what the filter would have left out is removed (by
// dpkg's rules: * also matches /, a directory goes when nothing inside it is
// kept; the four directories keep their mtimes, as under the filter), and
// the same options are written where --dpkgopt writes them, so dpkg
// --install of the essential packages and apt's install of the rest filter
// as before. The tarball is the same, byte for byte, as with --dpkgopt (the
// test recipe's package set, compared by hand), so bootstrapVersion stays.
func dpkgFilterHook(opts []string) string {
	var w []string
	for _, o := range opts {
		w = append(w, shellQuote(o))
	}
	return `printf '%s\n' ` + strings.Join(w, " ") + ` > "$1"/etc/dpkg/dpkg.cfg.d/99mmdebstrap && ` +
		`chroot "$1" sh -c 'for d in /usr/share/doc /usr/share/man /usr/share/info /usr/share/locale; do ` +
		`[ -d "$d" ] || continue; t=$(stat -c %Y "$d") && ` +
		`find "$d" -mindepth 1 ! -type d ! -path "/usr/share/doc/*/copyright" ! -path /usr/share/locale/locale.alias -delete && ` +
		`find "$d" -mindepth 1 -depth -type d -empty -delete && touch -m -d "@$t" "$d" || exit 1; done'`
}

func packagesHook(out string) string {
	return `chroot "$1" dpkg-query -W -f='${Package}\t${Version}\n' > ` + shellQuote(out)
}

// debsInHook links the staged .debs into the tree's apt archives, where
// apt takes a file of the right name and size instead of downloading it
// (mmdebstrap's cache pattern; --mode=root: "$1" is a host path). Files,
// not the directory: cp -a of the directory would give the tree's
// archives directory the staging directory's mode. The copy (another file
// system) replaces rather than overwrites what a failed link left: writing
// into a linked file would write into the pool.
func debsInHook(stage string) string {
	dst := `"$1"/var/cache/apt/archives/`
	return `mkdir -p ` + dst + ` && { cp -l ` + shellQuote(stage) + `/*.deb ` + dst + ` 2>/dev/null || cp -p --remove-destination ` + shellQuote(stage) + `/*.deb ` + dst + `; }`
}

// debsOutHook links every .deb that is not one of the staged files (so apt
// downloaded it in this bootstrap) into fresh, before mmdebstrap's cleanup
// empties the archives. The tree is not changed.
func debsOutHook(stage, fresh string) string {
	return `cd "$1"/var/cache/apt/archives && for f in *.deb; do ` +
		`if [ -f "$f" ] && ! [ "$f" -ef ` + shellQuote(stage) + `/"$f" ]; then ` +
		`ln "$f" ` + shellQuote(fresh) + `/ 2>/dev/null || cp -p "$f" ` + shellQuote(fresh) + `/ || exit 1; fi; done`
}

// nativeDir is where, inside a foreign tree, cmd/nativedpkg sits as
// dpkg-deb and dpkg-split while packages are installed: first on the PATH
// dpkg inherits, so dpkg (emulated) starts it natively for what it asks
// of them while it unpacks (deb_reassemble, the control files, the
// filesystem tree), instead of starting the tree's own under qemu-user,
// which then decompresses every package in emulation: a fifth of the
// test recipe's arm64 bootstrap (BenchmarkForeignBootstrap). The
// bytes dpkg gets are the same (internal/debpkg's tests hold them against
// Debian's dpkg-deb), so the step's key does not name it.
const nativeDir = "/.osb-native"

// nativeDpkgHooks put bin into the tree as nativeDir's two tools once the
// essential packages are extracted, and remove them before the tree is
// customized, with the apt.conf file mmdebstrap leaves in the tree for
// nativeAptPath (the only --aptopt the bootstrap passes).
func nativeDpkgHooks(bin string) (extract, customize string) {
	d := `"$1"` + nativeDir
	return `mkdir ` + d + ` && cp ` + shellQuote(bin) + ` ` + d + `/dpkg-deb && ln ` + d + `/dpkg-deb ` + d + `/dpkg-split`,
		`rm -r ` + d + ` "$1"/etc/apt/apt.conf.d/99mmdebstrap`
}

// nativeAptPath: apt runs dpkg with a PATH of its own, DPkg::Path (Debian's
// default, with nativeDir first).
const nativeAptPath = `--aptopt=DPkg::Path "` + nativeDir + `:/usr/sbin:/usr/bin:/sbin:/bin"`

func (s *bootstrapStep) Run(ctx context.Context, out string) error {
	tree, err := os.MkdirTemp(s.work, "rootfs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tree)
	if err := s.install(ctx, tree, out); err != nil {
		return err
	}
	root, err := fsroot.Open(tree)
	if err != nil {
		return err
	}
	err = sandboxAptPartial(root)
	if err == nil {
		err = removeMachineState(root)
	}
	root.Close()
	if err != nil {
		return err
	}
	return squashLayer(ctx, tree, out, s.epoch)
}

// aptPartialDirs are the directories apt downloads into as its sandbox
// user, _apt.
var aptPartialDirs = []string{"/var/cache/apt/archives/partial", "/var/lib/apt/lists/partial"}

// sandboxAptPartial gives aptPartialDirs to _apt, as a sandboxed apt leaves
// them. mmdebstrap's apt runs unsandboxed here (the tree is in the cache
// directory, which _apt may not enter) and leaves them to root.
func sandboxAptPartial(root *fsroot.Root) error {
	passwd, err := root.ReadFile("/etc/passwd", 1<<20)
	if err != nil {
		return nil // no users: no apt either
	}
	for _, line := range strings.Split(string(passwd), "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 || f[0] != "_apt" {
			continue
		}
		uid, err := strconv.Atoi(f[2])
		if err != nil {
			return fmt.Errorf("/etc/passwd: _apt: uid %q", f[2])
		}
		for _, d := range aptPartialDirs {
			if fi, err := root.Lstat(d); err != nil || !fi.IsDir() {
				continue
			}
			if err := root.Lchown(d, uid, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// install runs mmdebstrap into the empty directory tree and writes the
// package list into out.
func (s *bootstrapStep) install(ctx context.Context, tree, out string) error {
	b := s.r.Base
	var pool []string
	var fresh string
	if s.debs != nil {
		stage, err := os.MkdirTemp(s.work, "debs-in-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(stage)
		if fresh, err = os.MkdirTemp(s.work, "debs-new-"); err != nil {
			return err
		}
		defer os.RemoveAll(fresh)
		// --skip=download/empty: newer mmdebstrap refuses a non-empty
		// archives directory without it; essential/unlink keeps the
		// essential .debs until the out hook has seen them.
		pool = append(pool, "--skip=download/empty", "--skip=essential/unlink")
		n, err := s.debs.stage(stage, s.logf)
		if err != nil {
			s.logf("warning: %v (downloading every package)", err)
		} else if n > 0 {
			pool = append(pool, "--setup-hook="+debsInHook(stage))
		}
		pool = append(pool, "--customize-hook="+debsOutHook(stage, fresh))
	}
	args := []string{
		"--variant=apt",
		"--mode=root",
		"--format=directory",
		"--arch=" + b.Architecture,
		"--components=" + strings.Join(b.Components, ","),
		"--extract-hook=" + dpkgFilterHook(dpkgOptions(s.r)),
		"--essential-hook=" + noInitramfsHook,
	}
	if h := pruneExtractHook(s.r); h != "" {
		args = append(args, "--extract-hook="+h)
	}
	env := append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(s.epoch, 10))
	if s.native != nil {
		bin, err := s.writeNative(ctx)
		if err != nil {
			s.logf("warning: %v (dpkg-deb runs emulated)", err)
		} else {
			defer os.RemoveAll(filepath.Dir(bin))
			extract, customize := nativeDpkgHooks(bin)
			args = append(args, "--extract-hook="+extract, "--customize-hook="+customize, nativeAptPath)
			// mmdebstrap runs its own chroots (the essential packages'
			// dpkg) with the PATH it is given; on the host the directory
			// does not exist.
			env = append(env, "PATH="+nativeDir+":"+os.Getenv("PATH"))
		}
	}
	args = append(args, pool...)
	if h := pruneRemoveHook(s.r); h != "" {
		args = append(args, "--customize-hook="+h)
	}
	args = append(args,
		"--customize-hook="+cleanupHook,
		"--customize-hook="+packagesHook(filepath.Join(out, step.PackagesList)),
	)
	if len(s.packages) > 0 {
		args = append(args, "--include="+strings.Join(s.packages, ","))
	}
	args = append(args, b.Release, tree, b.Mirror)
	// --verbose lets apt and dpkg talk: their lines are the progress.
	args = append([]string{"--verbose"}, args...)
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Env = env
	// Cancelled (another step failed, or ^C): mmdebstrap waits for apt or
	// dpkg before it acts on a signal, so SIGTERM goes to its whole process
	// group; it then unmounts what it mounted and exits. SIGKILL to the
	// group only if that takes too long.
	//
	// Its mounts (/proc, /sys, /dev in the tree) are made in a mount
	// namespace of its own (Go makes it private to the host), so a
	// builder killed with mmdebstrap still running leaves no mount under
	// the work directory the next build's sweep removes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Unshareflags: syscall.CLONE_NEWNS}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	defer func() {
		if ctx.Err() != nil && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // stragglers
		}
	}()
	dpkg := &dpkgCounter{}
	tool := progress.NewLineCounter(ctx, "packages", dpkg.count)
	cmd.Stderr = tool
	cmd.Stdout = tool
	if err := cmd.Run(); err != nil {
		if located := s.unknownPackages(tool.String()); located != nil {
			return located
		}
		return fmt.Errorf("mmdebstrap %s: %w\n%s", b.Release, err, command.Tail(tool.String(), 40))
	}
	if s.debs != nil {
		// The bootstrap is good either way: a pool that cannot take the
		// new .debs only costs the next bootstrap their download.
		if _, err := s.debs.publish(fresh); err != nil {
			s.logf("warning: %v (the next bootstrap downloads these packages again)", err)
		}
	}
	return nil
}

// writeNative writes the native tools into a directory of their own under
// the step's work directory.
func (s *bootstrapStep) writeNative(ctx context.Context) (string, error) {
	dir, err := os.MkdirTemp(s.work, "native-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "nativedpkg")
	if err := s.native(ctx, bin); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return bin, nil
}

var aptNewlyInstalled = regexp.MustCompile(`^\d+ upgraded, (\d+) newly installed`)

// dpkgCounter follows apt and dpkg through each package's download,
// unpacking and configuration: a package counts as done once configured,
// and a third for each phase before.
type dpkgCounter struct{ want, got, unpacked, configured int64 }

func (c *dpkgCounter) count(line string, done, total *int64) {
	switch {
	case strings.HasPrefix(line, "Setting up "):
		c.configured++
	case strings.HasPrefix(line, "Unpacking "):
		c.unpacked++
	case strings.HasPrefix(line, "Get:") && c.want > 0 && !strings.Contains(line, "Release"):
		c.got++
	default:
		if m := aptNewlyInstalled.FindStringSubmatch(line); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			// The second apt run (packages past the essential set) adds
			// to what the first announced.
			c.want = max(c.want, c.configured+n)
		}
	}
	*done = (min(c.got, c.want) + c.unpacked + c.configured) / 3
	*total = max(c.want, *done)
}

var unableToLocate = regexp.MustCompile(`(?m)Unable to locate package (\S+)|Package '?([^' ]+)'? has no installation candidate`)

// unknownPackages turns apt's complaint about missing packages into errors
// that point at the recipe line that asked for them.
func (s *bootstrapStep) unknownPackages(out string) error {
	var errs []string
	seen := map[string]bool{}
	for _, m := range unableToLocate.FindAllStringSubmatch(out, -1) {
		pkg := m[1] + m[2]
		if seen[pkg] {
			continue
		}
		seen[pkg] = true
		file, line := s.r.PackageOrigin(pkg)
		errs = append(errs, fmt.Sprintf("%s:%d: packages: unknown package %q in debian %s (%s)", file, line, pkg, s.r.Base.Release, s.r.Base.Architecture))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(errs, "\n"))
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
