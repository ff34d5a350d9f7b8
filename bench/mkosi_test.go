// Package bench compares the builder with its anchor, mkosi 14 (Debian's
// package), side by side in one run on the same machine: the same Debian
// package set (mkosi/mkosi.conf and recipe.yaml), cold, warm and after one
// file changed, output sizes, peak RSS and boot time. Run it with
// `make bench`; it is a benchmark, never part of `make test`.
package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/internal/qemu"
	"github.com/ironcore-dev/os-builder/internal/qemu/qemutest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// run is one timed command: wall time and the peak RSS of the largest
// process in its tree (wait4's ru_maxrss covers waited-for descendants).
type run struct {
	wall   time.Duration
	maxRSS int64 // bytes
	err    error
	out    string
}

func timed(ctx context.Context, dir string, env []string, name string, args ...string) run {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Neither tool syncs its output: write back what the run before left
	// dirty, so that it is not charged to this one.
	syscall.Sync()
	start := time.Now()
	err := cmd.Run()
	r := run{wall: time.Since(start), err: err, out: out.String()}
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			r.maxRSS = ru.Maxrss * 1024
		}
	}
	return r
}

// side is one tool's three builds and its output.
type side struct {
	cold, warm, oneFile run
	size                int64
}

// BenchmarkMkosi builds bench/ with mkosi 14 and with the builder, one after
// the other, and reports the ratios (builder / mkosi).
func BenchmarkMkosi(b *testing.B) {
	for _, tool := range []string{"mkosi", "mmdebstrap", "mksquashfs", "go"} {
		testutil.RequireTool(b, tool)
	}
	if os.Geteuid() != 0 {
		b.Skip("mkosi and the builder run as root")
	}
	ctx := context.Background()
	repo, err := filepath.Abs("..")
	if err != nil {
		b.Fatal(err)
	}
	work := b.TempDir()
	tree := filepath.Join(work, "bench")
	if err := exec.Command("cp", "-a", filepath.Join(repo, "bench"), tree).Run(); err != nil {
		b.Fatal(err)
	}
	// The recipe looks its units up in ../units.
	if err := exec.Command("cp", "-a", filepath.Join(repo, "units"), work).Run(); err != nil {
		b.Fatal(err)
	}
	mk := filepath.Join(tree, "mkosi")
	if err := fillMkosiExtra(tree, filepath.Join(repo, "units")); err != nil {
		b.Fatal(err)
	}
	// The release builder (`make builder`): it carries its init, so it
	// builds outside the source tree like mkosi does.
	if out, err := exec.Command("make", "-C", repo, "builder", "BIN="+filepath.Join(work, "bin")).CombinedOutput(); err != nil {
		b.Fatalf("make builder: %v\n%s", err, out)
	}
	builder := filepath.Join(work, "bin", "builder")
	unmount, err := nspawnRuntimeDir()
	if err != nil {
		b.Fatal(err)
	}
	defer unmount()

	// mkosi keeps downloaded packages in Cache= and the installed tree in
	// its incremental cache; the builder keeps both in its cache dir. Cold
	// builds start with both empty.
	mkosiArgs := []string{"--force", "--incremental", "--nspawn-keep-unit", "--cache=" + filepath.Join(work, "mkosi-pkgs"), "build"}
	ourEnv := []string{"OSB_CACHE_DIR=" + filepath.Join(work, "osb-cache")}
	ourArgs := []string{"build", "recipe.yaml", "--output", filepath.Join(work, "out")}
	change := func(i int) {
		line := fmt.Sprintf("# changed by the benchmark, round %d\n", i)
		for _, p := range []string{filepath.Join(tree, "files/osb-bench.conf"), filepath.Join(mk, "mkosi.extra/etc/osb-bench.conf")} {
			if err := os.WriteFile(p, []byte(line), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	must := func(what string, r run) run {
		if r.err != nil {
			b.Fatalf("%s: %v\n%s", what, r.err, tailLines(r.out, 30))
		}
		return r
	}

	var m, o side
	for i := 0; i < b.N; i++ {
		os.RemoveAll(filepath.Join(work, "mkosi-pkgs"))
		os.RemoveAll(filepath.Join(work, "osb-cache"))
		os.MkdirAll(filepath.Join(work, "mkosi-pkgs"), 0o755)
		_ = exec.Command("mkosi", "-C", mk, "--incremental", "clean", "-ff").Run()

		m.cold = must("mkosi cold", timed(ctx, mk, nil, "mkosi", mkosiArgs...))
		o.cold = must("builder cold", timed(ctx, tree, ourEnv, builder, ourArgs...))
		m.warm = must("mkosi warm", timed(ctx, mk, nil, "mkosi", mkosiArgs...))
		o.warm = must("builder warm", timed(ctx, tree, ourEnv, builder, ourArgs...))
		change(i)
		m.oneFile = must("mkosi one file", timed(ctx, mk, nil, "mkosi", mkosiArgs...))
		o.oneFile = must("builder one file", timed(ctx, tree, ourEnv, builder, ourArgs...))
	}
	b.StopTimer()
	m.size = treeSize(b, filepath.Join(mk, "image"))
	o.size = treeSize(b, filepath.Join(work, "out"))

	// mkosi's bootable build needs loop partition scanning and a vfat
	// mount; try it and report why it failed where the kernel refuses.
	disk := timed(ctx, mk, nil, "mkosi", "--force", "--incremental", "--nspawn-keep-unit",
		"--cache="+filepath.Join(work, "mkosi-pkgs"), "--format=gpt_ext4", "--bootable", "--output=image.raw", "build")
	mkosiDisk := "built in " + disk.wall.Round(time.Second).String()
	if disk.err != nil {
		mkosiDisk = "not built (" + firstError(disk.out) + ")"
	}

	ratio := func(a, c run) float64 { return a.wall.Seconds() / c.wall.Seconds() }
	b.ReportMetric(o.cold.wall.Seconds(), "builder-cold-s")
	b.ReportMetric(m.cold.wall.Seconds(), "mkosi-cold-s")
	b.ReportMetric(ratio(o.cold, m.cold), "cold-ratio")
	b.ReportMetric(ratio(o.warm, m.warm), "warm-ratio")
	b.ReportMetric(ratio(o.oneFile, m.oneFile), "one-file-ratio")
	var t strings.Builder
	fmt.Fprintf(&t, "\n%-28s %12s %12s %8s\n", "same package set", "builder", "mkosi 14", "ratio")
	row := func(name string, a, c run) {
		fmt.Fprintf(&t, "%-28s %11.1fs %11.1fs %8.3f\n", name, a.wall.Seconds(), c.wall.Seconds(), ratio(a, c))
	}
	row("cold", o.cold, m.cold)
	row("warm (nothing changed)", o.warm, m.warm)
	row("one file changed", o.oneFile, m.oneFile)
	fmt.Fprintf(&t, "%-28s %11.0fM %11.0fM %8.3f\n", "output size", mib(o.size), mib(m.size), float64(o.size)/float64(m.size))
	fmt.Fprintf(&t, "%-28s %11.0fM %11.0fM\n", "peak RSS (cold)", mib(o.cold.maxRSS), mib(m.cold.maxRSS))
	fmt.Fprintf(&t, "builder: UKI + disk.raw; mkosi: Format=directory (tree, kernel, no initrd)\n")
	fmt.Fprintf(&t, "mkosi gpt_ext4 --bootable: %s\n", mkosiDisk)
	b.Log(t.String())

	boot := bootToMultiUser(b, filepath.Join(work, "out", "disk.raw"))
	b.ReportMetric(boot.Seconds(), "builder-boot-s")
	b.Logf("builder's disk.raw: firmware to multi-user.target in %.1fs, no failed unit", boot.Seconds())
}

// fillMkosiExtra gives mkosi's image what the builder's layer adds: the
// file the benchmark changes and the boot report, enabled.
func fillMkosiExtra(tree, units string) error {
	extra := filepath.Join(tree, "mkosi", "mkosi.extra")
	wants := filepath.Join(extra, "etc/systemd/system/multi-user.target.wants")
	for _, d := range []string{wants, filepath.Join(extra, "usr/lib/os-builder")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	copies := [][3]string{
		{filepath.Join(tree, "files/osb-bench.conf"), filepath.Join(extra, "etc/osb-bench.conf"), "0644"},
		{filepath.Join(tree, "files/boot-report"), filepath.Join(extra, "usr/lib/os-builder/boot-report"), "0755"},
		{filepath.Join(units, "osb-boot-report.service"), filepath.Join(extra, "etc/systemd/system/osb-boot-report.service"), "0644"},
	}
	for _, c := range copies {
		data, err := os.ReadFile(c[0])
		if err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if c[2] == "0755" {
			mode = 0o755
		}
		if err := os.WriteFile(c[1], data, mode); err != nil {
			return err
		}
	}
	return os.Symlink("../osb-boot-report.service", filepath.Join(wants, "osb-boot-report.service"))
}

// nspawnRuntimeDir makes mkosi's systemd-nspawn work on a host whose /run
// is not a tmpfs (nspawn refuses to clean its propagation directory on a
// disk file system): a tmpfs on /run/systemd/nspawn for the benchmark.
func nspawnRuntimeDir() (func(), error) {
	dir := "/run/systemd/nspawn"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil, err
	}
	if st.Type == unix.TMPFS_MAGIC {
		return func() {}, nil
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755"); err != nil {
		return nil, fmt.Errorf("tmpfs on %s: %w", dir, err)
	}
	return func() { unix.Unmount(dir, unix.MNT_DETACH) }, nil
}

// bootToMultiUser boots the disk as built (a throwaway overlay keeps the
// file unchanged) and times firmware to the boot report, which must name
// no failed unit.
func bootToMultiUser(b *testing.B, disk string) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	vm := qemutest.StartT(b, ctx, qemu.Config{UEFI: true, Disks: []string{disk}, ExtraArgs: []string{"-snapshot"}, MemoryMB: 2048})
	if _, err := vm.WaitFor(ctx, testutil.MultiUser); err != nil {
		b.Fatalf("boot: %v", err)
	}
	took := time.Since(start)
	report, stop := context.WithTimeout(ctx, 20*time.Second)
	defer stop()
	if _, err := vm.WaitFor(report, "failed units: none"); err != nil {
		b.Errorf("the boot report names failed units: %v", err)
	}
	return took
}

func treeSize(b *testing.B, dir string) int64 {
	out, err := exec.Command("du", "-sb", dir).Output()
	if err != nil {
		b.Fatalf("du %s: %v", dir, err)
	}
	var n int64
	fmt.Sscan(string(out), &n)
	return n
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

func firstError(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "Error") || strings.Contains(l, "error") || strings.Contains(l, "failed") {
			return strings.TrimSpace(l)
		}
	}
	return tailLines(out, 1)
}

func tailLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
