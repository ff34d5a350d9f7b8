package rootfs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/ironcore-dev/os-builder/builder/command"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/initrd"
	"github.com/ironcore-dev/os-builder/internal/filehash"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/recipe"
)

const assembleVersion = "12"

// assembleStep lays the recipe's files, units and users over the lower
// layers (base and binaries) and packs what they change as the root's top
// layer (layers.go). It also lifts out what later steps need from the
// tree: os-release, the UEFI stub and the init's tools (the kernel and
// its modules: kernelStep).
type assembleStep struct {
	r        *recipe.Recipe
	lowers   []string // layer step outputs below, bottom first
	lowerKey string   // the input key of the step just below (it chains the rest)
	epoch    int64
	work     string
}

// binary is one file produced by an oci or go step, bound for dest.
type binary struct {
	src, dest string
	step      string
	stepKey   string // the input key of the step: src is a function of it
}

// NewAssemble is the step that lays r's files, units and users over the
// layers below and squashes what they change as the root's top layer.
func NewAssemble(r *recipe.Recipe, below step.Stack, epoch int64, work string) step.Step {
	return &assembleStep{r: r, lowers: below.Dirs(), lowerKey: below.Key, epoch: epoch, work: work}
}

// TopLayer is the layer in the assemble step's output out.
func TopLayer(out string) step.Layer { return step.Layer{Dir: out, Name: step.TopLayer} }

func (s *assembleStep) Name() string { return "assemble" }

func (s *assembleStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", assembleVersion)
	// The layers below are a function of their inputs: the key of the top
	// one stands for them all without hashing them again.
	in.AddDigest("lower-layers", s.lowerKey)
	for _, f := range s.r.Files() {
		d, err := filehash.SourceTree(f.Source)
		if err != nil {
			return nil, fmt.Errorf("file %s: %w", f.Source, err)
		}
		in.Add("file:"+f.Destination, d+" "+f.Mode+" "+f.Owner+":"+f.Group)
	}
	for _, u := range s.r.Units() {
		d, err := filehash.SHA256(u.Path)
		if err != nil {
			return nil, err
		}
		in.Add("unit:"+u.Name, d+" enable="+strconv.FormatBool(u.Enable))
	}
	in.Add("sysusers", s.sysusers())
	in.Add("source-date-epoch", strconv.FormatInt(s.epoch, 10))
	// Which stub lift takes. Only named for arm64, the architecture
	// whose stub earlier builders did not lift: amd64's keys (and
	// everything cached under them) stay as they were.
	if stub := StubInTree(s.r.Base.Architecture); stub != step.StubFile {
		in.Add("stub", stub)
	}
	return in, nil
}

func (s *assembleStep) Run(ctx context.Context, out string) error {
	upper, err := overLayers(ctx, s.lowers, s.work, func(root *fsroot.Root) error {
		if err := s.populate(ctx, root); err != nil {
			return err
		}
		if err := s.lift(root, out); err != nil {
			return err
		}
		return removeMachineState(root) // what the layers brought
	})
	if err != nil {
		return err
	}
	if err := checkKernelUntouched(upper); err != nil {
		return err
	}
	return squashLayer(ctx, upper, out, s.epoch)
}

// populate lays the recipe's files, units and users over the tree.
func (s *assembleStep) populate(ctx context.Context, root *fsroot.Root) error {
	if err := s.applyFiles(ctx, root); err != nil {
		return err
	}
	if err := s.applyUnits(root); err != nil {
		return err
	}
	return s.applyUsers(ctx, root)
}

// installBinaries puts the oci and go steps' files at their destinations.
func installBinaries(root *fsroot.Root, bins []step.Binary) error {
	for _, b := range bins {
		if err := copyStepFileIn(root, b.Src, b.Dest, 0o755); err != nil {
			return fmt.Errorf("install %s from %s: %w", b.Dest, b.Step, err)
		}
	}
	return nil
}

// applyFiles copies the layers' files in. A destination resolves inside the
// image like in a chroot: /var/run/foo lands where the image's /var/run
// points, and a symlink a layer ships is followed inside the image too.
func (s *assembleStep) applyFiles(ctx context.Context, root *fsroot.Root) error {
	for _, f := range s.r.Files() {
		if err := applyFile(root, f); err != nil {
			return fmt.Errorf("file %s (layer %s): %w", f.Destination, f.Layer, err)
		}
		if f.Owner == "" && f.Group == "" && os.Geteuid() == 0 {
			continue // copies belong to the builder: already root:root
		}
		owner, group := f.Owner, f.Group
		if owner == "" {
			owner = "root"
		}
		if group == "" {
			group = "root"
		}
		// Names resolve against the image's passwd, so run chown there
		// (chroot confines its paths to the tree too).
		if err := command.Run(ctx, "chroot", root.Path(), "chown", "-R", owner+":"+group, f.Destination); err != nil {
			return fmt.Errorf("file %s: owner %s:%s: %w", f.Destination, owner, group, err)
		}
	}
	return nil
}

// applyFile replaces f's destination with a copy of its source tree, the
// way cp -a --no-preserve=ownership would, then applies its mode.
func applyFile(root *fsroot.Root, f recipe.ResolvedFile) error {
	if err := root.MkdirAll(path.Dir(f.Destination), 0o755); err != nil {
		return err
	}
	if err := root.RemoveAll(f.Destination); err != nil {
		return err
	}
	if err := copyTreeIn(root, f.Source, f.Destination); err != nil {
		return err
	}
	if perm, ok := f.Perm(); ok {
		return root.Chmod(f.Destination, perm)
	}
	return nil
}

// applyUnits installs unit files and enables them the way `systemctl enable`
// would, by the links their [Install] section asks for, but without
// needing systemd to run.
func (s *assembleStep) applyUnits(root *fsroot.Root) error {
	for _, u := range s.r.Units() {
		if err := installUnit(root, u); err != nil {
			return fmt.Errorf("unit %s (layer %s): %w", u.Name, u.Layer, err)
		}
	}
	return nil
}

func installUnit(root *fsroot.Root, u recipe.ResolvedUnit) error {
	unitPath := "/usr/lib/systemd/system/" + u.Name
	if err := copyIn(root, u.Path, unitPath, 0o644); err != nil {
		return err
	}
	if !u.Enable {
		return nil
	}
	f, err := os.Open(u.Path)
	if err != nil {
		return err
	}
	links, err := installLinks(u.Name, u.Path, f)
	f.Close()
	if err != nil {
		return err
	}
	for _, l := range links {
		if err := replaceSymlink(root, unitPath, "/etc/systemd/system/"+l); err != nil {
			return err
		}
	}
	return nil
}

// sysusers renders the recipe's users and groups as a sysusers.d file.
func (s *assembleStep) sysusers() string {
	var b strings.Builder
	b.WriteString("# Generated by os-builder from the recipe's users and groups.\n")
	for _, g := range s.r.Groups() {
		id := "-"
		if g.GID != nil {
			id = strconv.Itoa(*g.GID)
		}
		fmt.Fprintf(&b, "g %s %s\n", g.Name, id)
	}
	for _, u := range s.r.Users() {
		id := "-"
		if u.UID != nil {
			id = strconv.Itoa(*u.UID)
			if u.Group != "" {
				id += ":" + u.Group
			}
		} else if u.Group != "" {
			id = "-:" + u.Group
		}
		desc := u.Description
		if desc == "" {
			desc = "-"
		} else {
			desc = strconv.Quote(desc)
		}
		home, shell := u.Home, u.Shell
		if home == "" {
			home = "-"
		}
		if shell == "" {
			shell = "-"
		}
		fmt.Fprintf(&b, "u %s %s %s %s %s\n", u.Name, id, desc, home, shell)
		groups := append([]string(nil), u.Groups...)
		sort.Strings(groups)
		for _, g := range groups {
			fmt.Fprintf(&b, "m %s %s\n", u.Name, g)
		}
	}
	return b.String()
}

func (s *assembleStep) applyUsers(ctx context.Context, root *fsroot.Root) error {
	if len(s.r.Users()) == 0 && len(s.r.Groups()) == 0 {
		return nil
	}
	const conf = "/usr/lib/sysusers.d/os-builder.conf"
	if err := root.MkdirAll(path.Dir(conf), 0o755); err != nil {
		return err
	}
	if err := root.WriteFile(conf, strings.NewReader(s.sysusers()), 0o644); err != nil {
		return err
	}
	// Create them now too, so files can be owned by them and the image's
	// passwd is complete without a first-boot step. The lines go inline:
	// a file argument would be a host path, not one inside the tree.
	args := []string{"--root=" + root.Path(), "--inline"}
	for _, l := range strings.Split(s.sysusers(), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			args = append(args, l)
		}
	}
	if err := command.Run(ctx, "systemd-sysusers", args...); err != nil {
		return fmt.Errorf("users: %w", err)
	}
	// Home directories sysusers does not create.
	for _, u := range s.r.Users() {
		if u.Home == "" || u.Home == "/" || strings.HasPrefix(u.Home, "/nonexistent") {
			continue
		}
		if err := root.MkdirAll(u.Home, 0o750); err != nil {
			return fmt.Errorf("user %s home: %w", u.Name, err)
		}
		grp := u.Group
		if grp == "" {
			grp = u.Name
		}
		if err := command.Run(ctx, "chroot", root.Path(), "chown", u.Name+":"+grp, u.Home); err != nil {
			return fmt.Errorf("user %s home: %w", u.Name, err)
		}
	}
	return nil
}

// lift copies os-release, the UEFI stub and the init's tools out of the
// tree for the steps that make boot artifacts.
func (s *assembleStep) lift(root *fsroot.Root, out string) error {
	if err := copyOut(root, "/usr/lib/os-release", filepath.Join(out, step.OSReleaseFile), 0o644); err != nil {
		return fmt.Errorf("os-release: %w", err)
	}
	// The stub of the image's own architecture, from its systemd-boot-efi
	// (never the host's), lifted under one name for every architecture.
	stub := "/usr/lib/systemd/boot/efi/" + StubInTree(s.r.Base.Architecture)
	if _, err := root.Stat(stub); err == nil {
		if err := copyOut(root, stub, filepath.Join(out, step.StubFile), 0o644); err != nil {
			return fmt.Errorf("UEFI stub: %w", err)
		}
	}
	return liftInitrdTools(root, out)
}

// StubInTree is the name of arch's systemd-stub in systemd-boot-efi's
// /usr/lib/systemd/boot/efi.
func StubInTree(arch string) string {
	if arch == "arm64" {
		return "linuxaa64.efi.stub"
	}
	return "linuxx64.efi.stub"
}

// initrdTools are the image's programs the init runs: mke2fs formats the
// data partition for persisted paths. The CA bundle, when the image has
// one, lets the init fetch over https.
var initrdTools = []struct {
	path     string
	optional bool
}{
	{"/sbin/mke2fs", false},
	{"/etc/mke2fs.conf", false},
	{"/etc/ssl/certs/ca-certificates.crt", true},
}

func liftInitrdTools(root *fsroot.Root, out string) error {
	var files []string
	for _, t := range initrdTools {
		if _, err := root.Stat(t.path); err != nil {
			if t.optional {
				continue
			}
			return fmt.Errorf("the init needs %s from the image (package e2fsprogs)", t.path)
		}
		files = append(files, t.path)
	}
	if _, err := initrd.LiftFiles(root, files, filepath.Join(out, step.InitrdFiles)); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, step.InitrdList), []byte(strings.Join(files, "\n")+"\n"), 0o644)
}

// readKernelRelease reads what lift wrote.
func readKernelRelease(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, step.KernelRelease))
	return strings.TrimSpace(string(b)), err
}

func mksquashfs(ctx context.Context, root, out string, epoch int64) error {
	return mksquashfsComp(ctx, root, out, epoch, squashComp)
}

// squashComp is the compression every layer image gets (see mksquashfs;
// BenchmarkSquashfsCompression measures the others on the hypervisor's
// base).
var squashComp = []string{"-comp", "zstd", "-Xcompression-level", "6", "-b", "1M"}

func mksquashfsComp(ctx context.Context, root, out string, epoch int64, comp []string) error {
	e := strconv.FormatInt(epoch, 10)
	// zstd: fast to decompress at boot. Level 6, measured on the test
	// recipe's tree: 7 s against 46 s for level 15, for a 2.4% larger image
	// (level 3: 3.4 s, +10%). Fixed times keep the image reproducible.
	// -mem 256M: by default its caches grow to about a GiB on a 942 MB tree
	// (the hypervisor's base); bounded, it writes the same bytes as fast
	// (4.5 s either way) with 170 MB resident.
	args := append([]string{root, out, "-noappend"}, comp...)
	cmd := exec.CommandContext(ctx, "mksquashfs", append(args,
		"-mkfs-time", e, "-all-time", e, "-no-progress", "-quiet", "-processors", strconv.Itoa(runtime.NumCPU()), "-mem", "256M")...)
	cmd.Env = withoutEnv(os.Environ(), "SOURCE_DATE_EPOCH") // it refuses both
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mksquashfs: %w\n%s", err, command.Tail(string(b), 20))
	}
	return nil
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// machineState is what package scripts leave behind that belongs to one
// machine, not to an image every node boots: identities, secrets, seeds.
// Shipping SSH host keys would hand every node's private key to anyone who
// pulls the image; the rest would also make builds differ byte for byte.
var machineState = []string{
	"etc/ssh/ssh_host_*_key",
	"etc/ssh/ssh_host_*_key.pub",
	"var/lib/dbus/machine-id",
	"var/lib/systemd/random-seed",
	"var/cache/ldconfig/aux-cache",
	"var/cache/debconf/*-old",
	"var/lib/dpkg/*-old",
}

func removeMachineState(root *fsroot.Root) error {
	for _, pattern := range machineState {
		matches, err := root.Glob(pattern)
		if err != nil {
			return err
		}
		for _, m := range matches {
			if err := root.Remove(m); err != nil {
				return err
			}
		}
	}
	// A fresh machine-id on first boot: systemd fills an empty file. It
	// keeps the mode the image gave it.
	mode := os.FileMode(0o444)
	if fi, err := root.Lstat("/etc/machine-id"); err == nil && fi.Mode().IsRegular() {
		if fi.Size() == 0 {
			return nil // already fresh (the base's): no copy in the top layer
		}
		mode = fi.Mode().Perm()
	}
	return root.WriteFile("/etc/machine-id", strings.NewReader(""), mode)
}
