package initrd

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
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

// resolveInRoot resolves p (absolute, as seen inside root) to a host path
// inside root, following symlinks as if root were /: absolute targets are
// taken relative to root, and ".." never leaves it.
func resolveInRoot(root, p string) (string, error) {
	cur := "/"
	rest := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	for hops := 0; len(rest) > 0; {
		part := rest[0]
		rest = rest[1:]
		if part == "" || part == "." {
			continue
		}
		next := path.Join(cur, part)
		fi, err := os.Lstat(filepath.Join(root, next))
		if err != nil {
			return "", fmt.Errorf("initrd: %s in %s: %w", p, root, err)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("initrd: %s in %s: too many symlinks", p, root)
		}
		target, err := os.Readlink(filepath.Join(root, next))
		if err != nil {
			return "", fmt.Errorf("initrd: %w", err)
		}
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		rest = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), rest...)
		cur = "/"
	}
	return filepath.Join(root, cur), nil
}

// fileWithDeps is one file to copy: where it goes in the initrd and where
// it comes from on the host.
type fileWithDeps struct {
	initrdPath, hostPath string
}

// collectFiles resolves files (absolute paths inside root) and, for dynamic
// ELF executables and libraries, their program interpreter and DT_NEEDED
// libraries, recursively. Files go to the initrd at the path asked for;
// libraries and the interpreter at the path where they were found, so the
// dynamic loader's default search finds them.
func collectFiles(root string, files []string) ([]fileWithDeps, error) {
	var out []fileWithDeps
	seen := map[string]bool{}
	var add func(initrdPath string) error
	add = func(initrdPath string) error {
		initrdPath = path.Clean("/" + initrdPath)
		if seen[initrdPath] {
			return nil
		}
		seen[initrdPath] = true
		host, err := resolveInRoot(root, initrdPath)
		if err != nil {
			return err
		}
		out = append(out, fileWithDeps{initrdPath: initrdPath, hostPath: host})
		f, err := elf.Open(host)
		if err != nil {
			var fe *elf.FormatError
			if errors.As(err, &fe) || strings.Contains(err.Error(), "bad magic") {
				return nil // not ELF: a data file such as a CA bundle
			}
			return fmt.Errorf("initrd: read %s: %w", host, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type != elf.PT_INTERP {
				continue
			}
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return fmt.Errorf("initrd: %s: read interpreter: %w", host, err)
			}
			if err := add(strings.TrimRight(string(b), "\x00")); err != nil {
				return err
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("initrd: %s: %w", host, err)
		}
		for _, lib := range libs {
			found := ""
			for _, d := range libDirs {
				if _, err := resolveInRoot(root, path.Join("/", d, lib)); err == nil {
					found = path.Join("/", d, lib)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("initrd: %s needs %s, which is in none of %s under %s", initrdPath, lib, strings.Join(libDirs, ", "), root)
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
func addFiles(a *Archive, root string, files []string) error {
	list, err := collectFiles(root, files)
	if err != nil {
		return err
	}
	for _, f := range list {
		fi, err := os.Stat(f.hostPath)
		if err != nil {
			return fmt.Errorf("initrd: %w", err)
		}
		if err := a.AddHostFile(f.initrdPath, fi.Mode().Perm(), f.hostPath); err != nil {
			return err
		}
	}
	return nil
}

// LiftFiles copies files (absolute paths inside root) and everything they
// need at run time (interpreter, shared libraries) into dest at the same
// paths, so that dest can serve as AssembleOptions.FilesRoot once root is
// gone. It returns the paths copied, dependencies included.
func LiftFiles(root string, files []string, dest string) ([]string, error) {
	list, err := collectFiles(root, files)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range list {
		fi, err := os.Stat(f.hostPath)
		if err != nil {
			return nil, fmt.Errorf("initrd: %w", err)
		}
		to := filepath.Join(dest, f.initrdPath)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return nil, fmt.Errorf("initrd: %w", err)
		}
		if err := copyHostFile(f.hostPath, to, fi.Mode().Perm()); err != nil {
			return nil, err
		}
		paths = append(paths, f.initrdPath)
	}
	return paths, nil
}

func copyHostFile(from, to string, perm os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("initrd: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("initrd: copy %s: %w", from, err)
	}
	return out.Close()
}
