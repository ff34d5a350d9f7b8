package rootfs

import (
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/initrd/rootstack"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// BenchmarkSquashfsCompression squashes one base layer, the hypervisor's
// (OSB_HYPERVISOR_OUTPUT) or else the test recipe's, with each compression
// side by side: the image's size (image-MB), the time to squash it
// (squash-s), and the time the kernel takes to read every file of it
// mounted (read-s: what a boot in memory pays for the files it reads, all
// of them here, on a loop device over the page cache as the init's).
// Run with -benchtime 1x (`make bench`); needs root for the mount.
func BenchmarkSquashfsCompression(b *testing.B) {
	buildertest.RequireTools(b, "mksquashfs", "unsquashfs", "mount", "umount")
	if os.Geteuid() != 0 {
		b.Skip("mounting the images needs root")
	}
	out := os.Getenv(testutil.HypervisorOutputEnv)
	if out == "" {
		out = testutil.Output(b, testutil.TestOutputEnv)
	}
	tree := filepath.Join(b.TempDir(), "tree")
	baseLayer(b, filepath.Join(out, "root.squashfs"), tree)
	variants := []struct {
		name string
		comp []string
	}{
		{"zstd-6-1M(default)", squashComp},
		{"zstd-3-1M", []string{"-comp", "zstd", "-Xcompression-level", "3", "-b", "1M"}},
		{"zstd-15-1M", []string{"-comp", "zstd", "-Xcompression-level", "15", "-b", "1M"}},
		{"zstd-19-1M", []string{"-comp", "zstd", "-Xcompression-level", "19", "-b", "1M"}},
		{"zstd-6-128K", []string{"-comp", "zstd", "-Xcompression-level", "6", "-b", "128K"}},
		{"xz-1M", []string{"-comp", "xz", "-b", "1M"}},
		{"xz-x86-1M", []string{"-comp", "xz", "-Xbcj", "x86", "-b", "1M"}},
	}
	var lines []string
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			img := filepath.Join(b.TempDir(), "layer.squashfs")
			var squash, read time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := mksquashfsComp(context.Background(), tree, img, buildertest.Epoch, v.comp); err != nil {
					b.Fatal(err)
				}
				squash = time.Since(start)
				read = readMounted(b, img)
			}
			fi, err := os.Stat(img)
			if err != nil {
				b.Fatal(err)
			}
			mb := float64(fi.Size()) / 1e6
			b.ReportMetric(mb, "image-MB")
			b.ReportMetric(squash.Seconds(), "squash-s")
			b.ReportMetric(read.Seconds(), "read-s")
			lines = append(lines, v.name+"\t"+strings.Join([]string{f1(mb), f1(squash.Seconds()), f1(read.Seconds())}, "\t"))
		})
	}
	b.Logf("%s: compression\timage MB\tsquash s\tread s\n%s", out, strings.Join(lines, "\n"))
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// baseLayer unpacks the base layer (the stack's first part) of a root
// image into tree.
func baseLayer(b *testing.B, root, tree string) {
	f, err := os.Open(root)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	parts, err := rootstack.Read(f, fi.Size())
	if err != nil {
		b.Fatal(err)
	}
	img := filepath.Join(b.TempDir(), "base.squashfs")
	w, err := os.Create(img)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(w, io.NewSectionReader(f, parts[0].Offset, parts[0].Size)); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("unsquashfs", "-no-progress", "-d", tree, img).CombinedOutput(); err != nil {
		b.Fatalf("unsquashfs: %v\n%s", err, out)
	}
}

// readMounted mounts img and reads every regular file in it, timed.
func readMounted(b *testing.B, img string) time.Duration {
	mnt := b.TempDir()
	if out, err := exec.Command("mount", "-t", "squashfs", "-o", "loop,ro", img, mnt).CombinedOutput(); err != nil {
		b.Fatalf("mount %s: %v\n%s", img, err, out)
	}
	defer exec.Command("umount", mnt).Run()
	start := time.Now()
	err := filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(io.Discard, f)
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
