package initrd

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// NetworkModules are the NIC drivers the init needs to fetch over the
// network (osb.root=http(s)://..., osb.mode=install): virtio for VMs and
// the common server NICs (Intel, Mellanox, Broadcom). The packet socket the
// DHCP client uses (af_packet) is built into Debian's kernel.
var NetworkModules = []string{
	"virtio_net", "e1000", "e1000e", "igb", "ixgbe", "i40e", "ice",
	"mlx5_core", "bnxt_en", "tg3",
}

// libDirs are searched, inside the root, for an executable's DT_NEEDED
// libraries: Debian's multiarch directories first.
var libDirs = []string{
	"usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu",
	"usr/lib/aarch64-linux-gnu", "lib/aarch64-linux-gnu",
	"usr/lib64", "lib64", "usr/lib", "lib",
}

// maxTreeFile bounds a file read from a tree into memory: a kernel module
// or a program with its libraries is far smaller.
const maxTreeFile = 256 << 20

// fileWithDeps is one file to copy: its path in the tree is its path in
// the initrd, resolved inside the tree when read.
type fileWithDeps struct {
	initrdPath string
}

// collectFiles resolves files (absolute paths inside root) and, for dynamic
// ELF executables and libraries, their program interpreter and DT_NEEDED
// libraries, recursively. Files go to the initrd at the path asked for;
// libraries and the interpreter at the path where they were found, so the
// dynamic loader's default search finds them.
func collectFiles(root *fsroot.Root, files []string) ([]fileWithDeps, error) {
	var out []fileWithDeps
	seen := map[string]bool{}
	var add func(initrdPath string) error
	add = func(initrdPath string) error {
		initrdPath = path.Clean("/" + initrdPath)
		if seen[initrdPath] {
			return nil
		}
		seen[initrdPath] = true
		file, err := root.Open(initrdPath)
		if err != nil {
			return fmt.Errorf("initrd: %w", err)
		}
		defer file.Close()
		if fi, err := file.Stat(); err != nil {
			return fmt.Errorf("initrd: %w", err)
		} else if !fi.Mode().IsRegular() {
			return fmt.Errorf("initrd: %s: not a regular file", file.Name())
		}
		out = append(out, fileWithDeps{initrdPath: initrdPath})
		name := file.Name()
		f, err := elf.NewFile(file)
		if err != nil {
			var fe *elf.FormatError
			if errors.As(err, &fe) || strings.Contains(err.Error(), "bad magic") || errors.Is(err, io.EOF) {
				return nil // not ELF: a data file such as a CA bundle
			}
			return fmt.Errorf("initrd: read %s: %w", name, err)
		}
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			if p.Filesz > 4096 { // bounded before allocating: PATH_MAX
				return fmt.Errorf("initrd: %s: interpreter path of %d bytes", name, p.Filesz)
			}
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return fmt.Errorf("initrd: %s: read interpreter: %w", name, err)
			}
			if err := add(strings.TrimRight(string(b), "\x00")); err != nil {
				return err
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("initrd: %s: %w", name, err)
		}
		for _, lib := range libs {
			found := ""
			for _, d := range libDirs {
				if _, err := root.Stat(path.Join("/", d, lib)); err == nil {
					found = path.Join("/", d, lib)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("initrd: %s needs %s, which is in none of %s under %s", initrdPath, lib, strings.Join(libDirs, ", "), root.Path())
			}
			if err := add(found); err != nil {
				return err
			}
		}
		return nil
	}
	for _, f := range files {
		if !path.IsAbs(f) {
			return nil, fmt.Errorf("initrd: file %q is not an absolute path", f)
		}
		if err := add(f); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// addFiles puts the files and their dependencies into a.
func addFiles(a *Archive, root *fsroot.Root, files []string) error {
	list, err := collectFiles(root, files)
	if err != nil {
		return err
	}
	for _, f := range list {
		data, perm, err := readTreeFile(root, f.initrdPath)
		if err != nil {
			return err
		}
		if err := a.AddFile(f.initrdPath, perm, data); err != nil {
			return err
		}
	}
	return nil
}

// readTreeFile reads the regular file name of the tree, with its mode.
func readTreeFile(root *fsroot.Root, name string) ([]byte, fs.FileMode, error) {
	fi, err := root.Stat(name)
	if err != nil {
		return nil, 0, fmt.Errorf("initrd: %w", err)
	}
	data, err := root.ReadFile(name, maxTreeFile)
	if err != nil {
		return nil, 0, fmt.Errorf("initrd: %w", err)
	}
	return data, fi.Mode().Perm(), nil
}

// LiftFiles copies files (absolute paths inside root, resolved there) and
// everything they need at run time (interpreter, shared libraries) into
// the host directory dest at the same paths, so that dest can serve as
// AssembleOptions.FilesRoot once root is gone. It returns the paths
// copied, dependencies included.
func LiftFiles(root *fsroot.Root, files []string, dest string) ([]string, error) {
	list, err := collectFiles(root, files)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range list {
		data, perm, err := readTreeFile(root, f.initrdPath)
		if err != nil {
			return nil, err
		}
		to := filepath.Join(dest, f.initrdPath)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return nil, fmt.Errorf("initrd: %w", err)
		}
		if err := os.WriteFile(to, data, perm); err != nil {
			return nil, fmt.Errorf("initrd: %w", err)
		}
		paths = append(paths, f.initrdPath)
	}
	return paths, nil
}
