package initrd

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"

	"github.com/ironcore-dev/os-builder/initrd/layout"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// AssembleOptions describe an initrd.
type AssembleOptions struct {
	// Output is the initrd file to write. It is written to a temporary file
	// next to it and renamed into place, so it is either complete or absent.
	Output string
	// InitBinary is the host path of the init (see InitSource).
	InitBinary string
	// RootFS is the OS tree whose kernel modules go into the initrd.
	RootFS string
	// KernelRelease selects the kernel; "" means the only one in RootFS.
	KernelRelease string
	// Modules are the module names to include with their dependencies;
	// nil means DefaultModules.
	Modules []string
	// ExtraModules are added to Modules (the recipe's kernel.modules).
	ExtraModules []string
	// RootImage is the host path of the read-only root image to put at
	// /root.img for memory-mode boots; "" for none.
	RootImage string
	// Files are absolute paths inside FilesRoot copied to the same paths in
	// the initrd; ELF executables bring their interpreter and shared
	// libraries. The init uses /sbin/mke2fs (to format a new osb-data
	// partition) and /etc/ssl/certs/ca-certificates.crt (for https) when
	// present; see docs/cmdline.md.
	Files []string
	// FilesRoot is the tree Files come from; "" means RootFS.
	FilesRoot string
	// Cmdline is the image's own kernel command line, written to
	// layout.CmdlinePath (at most layout.MaxCmdline bytes) when not empty;
	// the init merges it with the loader's (docs/cmdline.md).
	Cmdline string
	// SourceDateEpoch is every entry's mtime.
	SourceDateEpoch int64
	// Compression; "" means CompressionZstd.
	Compression Compression
}

// Assemble writes the initrd described by opts: /init, /dev/console, the
// directories the init mounts on, the kernel modules (decompressed, with
// their load order in layout.ModuleListPath) and optionally the root image.
func Assemble(opts AssembleOptions) error {
	if opts.Output == "" || opts.InitBinary == "" || opts.RootFS == "" {
		return errors.New("initrd: Assemble needs Output, InitBinary and RootFS")
	}
	a, err := assembleArchive(opts)
	if err != nil {
		return err
	}
	if opts.Compression == "" {
		opts.Compression = CompressionZstd
	}
	tmp, err := os.CreateTemp(filepath.Dir(opts.Output), "."+filepath.Base(opts.Output)+".*")
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if err := a.Encode(tmp, WriteOptions{SourceDateEpoch: opts.SourceDateEpoch, Compression: opts.Compression}); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("initrd: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("initrd: sync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	if err := os.Rename(tmp.Name(), opts.Output); err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	return nil
}

func assembleArchive(opts AssembleOptions) (*Archive, error) {
	// The trees are read as roots: their symlinks resolve inside them.
	rootfs, err := fsroot.Open(opts.RootFS)
	if err != nil {
		return nil, fmt.Errorf("initrd: %w", err)
	}
	defer rootfs.Close()
	kver := opts.KernelRelease
	if kver == "" {
		rels, err := KernelReleases(rootfs)
		if err != nil {
			return nil, err
		}
		if len(rels) != 1 {
			return nil, fmt.Errorf("initrd: %s has kernels %s; say which (KernelRelease)", opts.RootFS, strings.Join(rels, ", "))
		}
		kver = rels[0]
	}
	names := opts.Modules
	if names == nil {
		names = DefaultModules
	}
	names = append(append([]string(nil), names...), opts.ExtraModules...)
	files, err := ResolveModules(rootfs, kver, names)
	if err != nil {
		return nil, err
	}
	modDir, err := ModulesDir(rootfs, kver)
	if err != nil {
		return nil, err
	}

	a := NewArchive()
	for _, d := range []string{"/dev", "/proc", "/sys", "/run", layout.SysrootDir, "/tmp"} {
		if err := a.AddDir(d, 0o755); err != nil {
			return nil, err
		}
	}
	// The kernel opens /dev/console for the init before the init can mount
	// devtmpfs; without this node early messages would be lost.
	if err := a.AddCharDevice("/dev/console", 0o600, 5, 1); err != nil {
		return nil, err
	}
	if err := a.AddHostFile("/init", 0o755, opts.InitBinary); err != nil {
		return nil, err
	}
	var list strings.Builder
	list.WriteString("# Kernel modules the init loads, in order.\n")
	for _, rel := range files {
		dst, data, err := readModule(rootfs, modDir, rel)
		if err != nil {
			return nil, err
		}
		p := path.Join("/lib/modules", kver, dst)
		if err := a.AddFile(p, 0o644, data); err != nil {
			return nil, err
		}
		list.WriteString(p + "\n")
	}
	if err := a.AddFile(layout.ModuleListPath, 0o644, []byte(list.String())); err != nil {
		return nil, err
	}
	if len(opts.Files) > 0 {
		root := rootfs
		if opts.FilesRoot != "" {
			if root, err = fsroot.Open(opts.FilesRoot); err != nil {
				return nil, fmt.Errorf("initrd: %w", err)
			}
			defer root.Close()
		}
		if err := addFiles(a, root, opts.Files); err != nil {
			return nil, err
		}
	}
	if opts.Cmdline != "" {
		if len(opts.Cmdline)+1 > layout.MaxCmdline {
			return nil, fmt.Errorf("initrd: command line of %d bytes, more than %d", len(opts.Cmdline), layout.MaxCmdline-1)
		}
		if err := a.AddFile(layout.CmdlinePath, 0o644, []byte(opts.Cmdline+"\n")); err != nil {
			return nil, err
		}
	}
	if opts.RootImage != "" {
		if err := a.AddHostFile(layout.RootImagePath, 0o644, opts.RootImage); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// readModule returns the path a module gets in the initrd (without a
// compression suffix) and its bytes, decompressed. rel comes from
// modules.dep and is read inside root, whatever it says.
// Decompressing here rather than passing MODULE_INIT_COMPRESSED_FILE to
// finit_module means the init works whatever the kernel's
// CONFIG_MODULE_DECOMPRESS says; the outer initrd compression wins back
// the space.
func readModule(root *fsroot.Root, modDir, rel string) (string, []byte, error) {
	var open func(io.Reader) (io.Reader, error)
	var suffix string
	switch {
	case strings.HasSuffix(rel, ".ko.xz"):
		suffix = ".xz"
		open = func(r io.Reader) (io.Reader, error) { return xz.NewReader(r) }
	case strings.HasSuffix(rel, ".ko.zst"):
		suffix = ".zst"
		open = func(r io.Reader) (io.Reader, error) {
			d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
			if err != nil {
				return nil, err
			}
			return d.IOReadCloser(), nil
		}
	case strings.HasSuffix(rel, ".ko.gz"):
		suffix = ".gz"
		open = func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }
	case strings.HasSuffix(rel, ".ko"):
		data, err := root.ReadFile(path.Join(modDir, rel), maxTreeFile)
		if err != nil {
			return "", nil, fmt.Errorf("initrd: %w", err)
		}
		return rel, data, nil
	default:
		return "", nil, fmt.Errorf("initrd: %s: not a kernel module file name", rel)
	}
	compressed, err := root.ReadFile(path.Join(modDir, rel), maxTreeFile)
	if err != nil {
		return "", nil, fmt.Errorf("initrd: %w", err)
	}
	r, err := open(bytes.NewReader(compressed))
	if err != nil {
		return "", nil, fmt.Errorf("initrd: decompress %s: %w", rel, err)
	}
	data, err := io.ReadAll(io.LimitReader(r, maxTreeFile+1))
	if err == nil && len(data) > maxTreeFile {
		err = fmt.Errorf("more than %d bytes", maxTreeFile)
	}
	if err != nil {
		return "", nil, fmt.Errorf("initrd: decompress %s: %w", rel, err)
	}
	if c, ok := r.(io.Closer); ok {
		c.Close()
	}
	return strings.TrimSuffix(rel, suffix), data, nil
}
