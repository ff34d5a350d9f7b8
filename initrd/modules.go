package initrd

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

// MemoryModeModules are what the init needs to run the OS from RAM: a loop
// device for the root image, squashfs to read it, overlayfs for the
// writable layer.
var MemoryModeModules = []string{"loop", "squashfs", "overlay"}

// DefaultModules is what every initrd carries: the memory-mode set plus the
// block, bus and file system drivers that disk and ISO boots need to find
// their partitions (virtio for VMs, AHCI/NVMe/SCSI disks and CD-ROMs for
// servers), and the NIC drivers (NetworkModules) for fetching the root or
// the disk image over the network. virtio_pci is a bus driver that no module depends on, so it must
// be named. crc32c_generic backs ext4's metadata checksums on CPUs without
// SSE4.2, where crc32c_intel cannot load.
var DefaultModules = append(append(append([]string(nil), MemoryModeModules...),
	"virtio_pci", "virtio_blk", "virtio_scsi",
	"ahci", "nvme", "sd_mod", "sr_mod",
	"isofs", "ext4", "crc32c_generic",
	"vfat", "nls_cp437", "nls_ascii", "nls_utf8",
), NetworkModules...)

// moduleSuffixes are the file endings of kernel modules, compressed or not.
var moduleSuffixes = []string{".ko.xz", ".ko.zst", ".ko.gz", ".ko"}

// moduleName turns "kernel/fs/overlayfs/overlay.ko.xz" into "overlay" and
// folds '-' into '_' as the kernel does, so "crc-t10dif" and "crc_t10dif"
// are the same module.
func moduleName(file string) string {
	base := path.Base(file)
	for _, s := range moduleSuffixes {
		if strings.HasSuffix(base, s) {
			base = strings.TrimSuffix(base, s)
			break
		}
	}
	return normalizeModuleName(base)
}

func normalizeModuleName(n string) string { return strings.ReplaceAll(n, "-", "_") }

// ModulesDir returns the directory holding the modules of kernelRelease,
// as a path inside root (every path read from there resolves inside root,
// whatever modules.dep names).
func ModulesDir(root *fsroot.Root, kernelRelease string) (string, error) {
	if kernelRelease == "" || strings.Contains(kernelRelease, "/") || kernelRelease == "." || kernelRelease == ".." {
		return "", fmt.Errorf("initrd: %q is not a kernel release", kernelRelease)
	}
	for _, dir := range []string{"/usr/lib/modules", "/lib/modules"} {
		p := path.Join(dir, kernelRelease)
		if fi, err := root.Stat(path.Join(p, "modules.dep")); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("initrd: no modules.dep for kernel %s in %s (looked in usr/lib/modules and lib/modules)", kernelRelease, root.Path())
}

// KernelReleases lists the kernel releases that have modules in root.
func KernelReleases(root *fsroot.Root) ([]string, error) {
	seen := map[string]bool{}
	for _, dir := range []string{"/usr/lib/modules", "/lib/modules"} {
		names, err := root.ReadDirNames(dir)
		if err != nil {
			continue
		}
		for _, n := range names {
			if _, err := root.Stat(path.Join(dir, n, "modules.dep")); err == nil {
				seen[n] = true
			}
		}
	}
	var out []string
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("initrd: no kernel modules (modules.dep) in %s", root.Path())
	}
	return out, nil
}

// moduleDB is what depmod wrote for one kernel.
type moduleDB struct {
	files   map[string]string   // module name -> file (relative to the modules dir)
	deps    map[string][]string // file -> files it needs
	builtin map[string]bool     // names built into the kernel
	aliases map[string][]string // exact alias -> module names
	pre     map[string][]string // softdep pre: name -> module names or aliases
	post    map[string][]string // softdep post:
}

func loadModuleDB(root *fsroot.Root, dir string) (*moduleDB, error) {
	db := &moduleDB{
		files: map[string]string{}, deps: map[string][]string{}, builtin: map[string]bool{},
		aliases: map[string][]string{}, pre: map[string][]string{}, post: map[string][]string{},
	}
	err := eachLine(root, path.Join(dir, "modules.dep"), true, func(line string) error {
		file, deps, ok := strings.Cut(line, ":")
		if !ok {
			return fmt.Errorf("malformed line %q", line)
		}
		// Module files are relative paths below the modules directory.
		for _, f := range append([]string{file}, strings.Fields(deps)...) {
			if !fs.ValidPath(f) || f == "." {
				return fmt.Errorf("line %q: %q is not a path below the modules directory", line, f)
			}
		}
		db.files[moduleName(file)] = file
		db.deps[file] = strings.Fields(deps)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The remaining files are optional: depmod may not have written them.
	err = eachLine(root, path.Join(dir, "modules.builtin"), false, func(line string) error {
		db.builtin[moduleName(line)] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = eachLine(root, path.Join(dir, "modules.alias"), false, func(line string) error {
		f := strings.Fields(line)
		// Wildcard aliases match hardware ids; only exact ones name modules.
		if len(f) == 3 && f[0] == "alias" && !strings.ContainsAny(f[1], "*?[") {
			db.aliases[f[1]] = append(db.aliases[f[1]], normalizeModuleName(f[2]))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = eachLine(root, path.Join(dir, "modules.softdep"), false, func(line string) error {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "softdep" {
			return nil
		}
		name := normalizeModuleName(f[1])
		target := db.pre // "softdep a b" without pre:/post: means pre
		for _, w := range f[2:] {
			switch w {
			case "pre:":
				target = db.pre
			case "post:":
				target = db.post
			default:
				target[name] = append(target[name], w)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return db, nil
}

func eachLine(root *fsroot.Root, file string, required bool, fn func(string) error) error {
	f, err := root.Open(file)
	if err != nil {
		if !required && os.IsNotExist(err) {
			return nil
		}
		return fmt.Errorf("initrd: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(line); err != nil {
			return fmt.Errorf("initrd: %s: %w", file, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("initrd: read %s: %w", file, err)
	}
	return nil
}

// ResolveModules returns the module files needed to load names on kernel
// kernelRelease of root, dependencies first, each once, as paths relative
// to the kernel's modules directory (as modules.dep writes them, possibly
// compressed: .ko.xz/.ko.zst). Names may use '-' or '_' and may be exact
// aliases (fs-squashfs). A module built into the kernel needs no file and is
// not an error; a name found nowhere is. Soft dependencies are followed when
// they resolve and skipped when they do not, as modprobe does.
func ResolveModules(root *fsroot.Root, kernelRelease string, names []string) ([]string, error) {
	dir, err := ModulesDir(root, kernelRelease)
	if err != nil {
		return nil, err
	}
	db, err := loadModuleDB(root, dir)
	if err != nil {
		return nil, err
	}
	r := &resolver{db: db, visited: map[string]bool{}, visiting: map[string]bool{}}
	var missing []string
	for _, n := range names {
		if !r.resolve(n) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("initrd: kernel %s: module(s) %s not found in %s (not in modules.dep, modules.builtin or modules.alias)",
			kernelRelease, strings.Join(missing, ", "), dir)
	}
	return r.order, nil
}

type resolver struct {
	db       *moduleDB
	order    []string
	visited  map[string]bool // files already placed in order
	visiting map[string]bool // names being resolved, against softdep cycles
}

// resolve adds the files for name (or the modules an alias names) to the
// load order and reports whether name was known at all.
func (r *resolver) resolve(name string) bool {
	n := normalizeModuleName(name)
	if file, ok := r.db.files[n]; ok {
		r.visit(n, file)
		return true
	}
	if r.db.builtin[n] {
		return true
	}
	if mods, ok := r.db.aliases[name]; ok {
		found := false
		for _, m := range mods {
			if r.resolve(m) {
				found = true
			}
		}
		return found
	}
	return false
}

func (r *resolver) visit(name, file string) {
	if r.visited[file] || r.visiting[name] {
		return
	}
	r.visiting[name] = true
	defer delete(r.visiting, name)
	for _, soft := range r.db.pre[name] {
		r.resolve(soft)
	}
	for _, dep := range r.db.deps[file] {
		r.visit(moduleName(dep), dep)
	}
	if !r.visited[file] {
		r.visited[file] = true
		r.order = append(r.order, file)
	}
	for _, soft := range r.db.post[name] {
		r.resolve(soft)
	}
}
