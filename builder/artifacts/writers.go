// Package artifacts writes a build's artifacts (the live initrd, the root
// stack, the PXE files, the UKI, the disk, the ISO) from the steps' outputs
// into the staging directory, each writer hashing what it writes, and says
// in the manifest how they were signed and which Go programs they carry.
package artifacts

import (
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"debug/pe"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/initrd/cmdline"
	"github.com/ironcore-dev/os-builder/initrd/rootstack"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
	"github.com/ironcore-dev/os-builder/isoimage"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
	"github.com/ironcore-dev/os-builder/uki"
)

// Config is what the writers apply that no step made.
type Config struct {
	Outputs             recipe.OutputSet
	Cmdline             string
	Epoch               int64
	Name, Version, Arch string
	DataMiB             int64 // disk.raw's osb-data partition, 0: none
	Signer              crypto.Signer
	Cert                *x509.Certificate
	// Builder is the digest of the builder executable: part of every
	// writer key, so a new builder writes anew.
	Builder string
}

// Inputs are the steps' values the writers read.
type Inputs struct {
	Stack     *step.Value[step.Stack] // the root's layers, assemble's on top
	Assembled *step.Value[step.Assembled]
	Kernel    *step.Value[step.Kernel]
	NoRoot    *step.Value[string] // the initrd without root
}

// Artifact file names in an output directory.
const (
	FileKernel  = "vmlinuz"
	FileInitrd  = "initrd.img"
	FileNoRoot  = "initrd-noroot.img"
	FileRootfs  = "root.squashfs"
	FileCmdline = "cmdline"
	FileUKI     = "uki.efi"
	FileStub    = "stub.efi"
	FileDisk    = "disk.raw"
	FileISO     = "image.iso"
)

// Files written aside in the staging directory when no chosen output
// ships them, removed once the writers that read them are done
// (RemoveAside).
const (
	asideInitrd = ".live-initrd.img"
	asideRoot   = ".root-stack.img"
	asideUKI    = ".iso-uki.efi"
)

// Writer writes some files of an output directory: a node of the build
// graph that runs once the values it needs are set.
type Writer struct {
	Name  string
	Needs []step.Handover
	Files []string // what it writes, for progress
	// Size estimates the bytes it writes, for progress.
	Size  func() int64
	Write func(ctx context.Context) ([]osimage.Artifact, error)
	// Ships are the files it writes that the output keeps (nil when it
	// writes only for other writers); Key digests its inputs: together
	// they let a build take the files of an earlier output instead.
	Ships []string
	Key   func() (string, error)
	// gives is the file it writes for the writers after it.
	gives *step.Value[string]
	path  string
}

// Gives is what the writer hands on to the writers after it.
func (w *Writer) Gives() []step.Handover {
	if w.gives == nil {
		return nil
	}
	return []step.Handover{w.gives}
}

// Done hands on the file the writer wrote for the writers after it, once
// it is in place (written, or taken from an earlier output).
func (w *Writer) Done() {
	if w.gives != nil {
		w.gives.Set(w.path)
	}
}

// Writers are the writers of cfg's outputs into dir. The live initrd and
// the root stack are artifacts of pxe and inputs of the UKI and the disk:
// written once, aside when pxe does not ship them; the ISO carries the UKI
// the uki writer made.
func Writers(cfg Config, in Inputs, dir string) []*Writer {
	out := cfg.Outputs
	pxe, uki, disk, iso := out[recipe.OutputPXE], out[recipe.OutputUKI], out[recipe.OutputDisk], out[recipe.OutputISO]
	s := &writerSet{
		cfg: cfg, in: in, dir: dir, d: newArtifactDir(dir),
		epoch:      strconv.FormatInt(cfg.Epoch, 10),
		signer:     signerID(cfg.Cert),
		initrdName: aside(pxe, FileInitrd, asideInitrd),
		rootName:   aside(pxe, FileRootfs, asideRoot),
		ukiName:    aside(uki || !iso, FileUKI, asideUKI),
		live:       step.NewValue[string]("initrd", "the live initrd"),
		stack:      step.NewValue[string]("root", "the root stack"),
		efi:        step.NewValue[string]("uki", "the UKI"),
	}
	var ws []*Writer
	for _, w := range []struct {
		want bool
		make func() *Writer
	}{
		{pxe || uki || iso, s.initrd},
		{pxe || disk, s.root},
		{pxe, s.pxe},
		{uki || iso, s.uki},
		{(pxe || uki) && (uki || disk || iso), s.stub}, // the image has systemd-boot-efi only then (recipe.OutputSet.NeedsStub)
		{disk, s.disk},
		{iso, s.iso},
	} {
		if w.want {
			ws = append(ws, w.make())
		}
	}
	return ws
}

// writerSet is what the writers of one output directory share: where
// they write, the names of the files some write for others, and their
// keys' common parts.
type writerSet struct {
	cfg           Config
	in            Inputs
	dir           string
	d             *artifactDir
	epoch, signer string
	// The files the initrd, root and uki writers write (aside when no
	// chosen output ships them), and the values that hand them on.
	initrdName, rootName, ukiName string
	live, stack, efi              *step.Value[string]
}

func aside(ships bool, name, other string) string {
	if ships {
		return name
	}
	return other
}

// shipsIf is names when the output keeps them, else nil.
func shipsIf(ok bool, names ...string) []string {
	if !ok {
		return nil
	}
	return names
}

func (s *writerSet) kernel() step.Kernel          { return s.in.Kernel.Get() }
func (s *writerSet) rootLayers() []string         { return s.in.Stack.Get().Images() }
func (s *writerSet) outputs(o recipe.Output) bool { return s.cfg.Outputs[o] }

// key digests a writer's inputs. Writer keys name the cache entries a
// writer reads by path: an entry's directory is named by its key.
func (s *writerSet) key(name string, parts ...string) (string, error) {
	return writerKey(s.cfg.Builder, name, parts...)
}

func (s *writerSet) initrdKey() (string, error) {
	return s.key("initrd", append(s.rootLayers(), s.in.NoRoot.Get(), s.epoch)...)
}

func (s *writerSet) rootKey() (string, error) { return s.key("root", s.rootLayers()...) }

func (s *writerSet) ukiKey() (string, error) {
	k, err := s.initrdKey()
	if err != nil {
		return "", err
	}
	return s.key("uki", k, s.kernel().Dir, s.in.Assembled.Get().Dir, s.cfg.Cmdline, s.epoch, s.signer)
}

// one describes the file name the writer wrote.
func (s *writerSet) one(kind osimage.ArtifactKind, name string) ([]osimage.Artifact, error) {
	a, err := s.d.describe(kind, name)
	if err != nil {
		return nil, err
	}
	return []osimage.Artifact{a}, nil
}

// initrd writes the live initrd: the root's layers, then the initrd
// without root.
func (s *writerSet) initrd() *Writer {
	p := filepath.Join(s.dir, s.initrdName)
	pxe := s.outputs(recipe.OutputPXE)
	return &Writer{
		Name: "initrd", Needs: []step.Handover{s.in.Stack, s.in.NoRoot}, Files: []string{p},
		Ships: shipsIf(pxe, FileInitrd), Key: s.initrdKey,
		Size: func() int64 { return liveInitrdSize(s.in.Stack.Get(), s.in.NoRoot.Get()) },
		Write: func(ctx context.Context) ([]osimage.Artifact, error) {
			err := s.d.write(s.initrdName, func(w io.Writer) error {
				return writeLiveInitrd(w, s.in.Stack.Get(), s.in.NoRoot.Get(), s.cfg.Epoch)
			})
			if err != nil {
				return nil, fmt.Errorf("initrd: %w", err)
			}
			if !pxe {
				return nil, nil
			}
			return s.one(osimage.KindInitrd, FileInitrd)
		},
		gives: s.live, path: p,
	}
}

// root writes the root stack: the root's layer images in one file.
func (s *writerSet) root() *Writer {
	p := filepath.Join(s.dir, s.rootName)
	pxe := s.outputs(recipe.OutputPXE)
	return &Writer{
		Name: "root", Needs: []step.Handover{s.in.Stack}, Files: []string{p},
		Ships: shipsIf(pxe, FileRootfs), Key: s.rootKey,
		Size: func() int64 {
			var n int64
			for _, l := range s.rootLayers() {
				n += fileSize(l)
			}
			return n
		},
		Write: func(ctx context.Context) ([]osimage.Artifact, error) {
			err := s.d.write(s.rootName, func(w io.Writer) error {
				_, err := rootstack.WriteOpened(w, s.rootLayers(), fsroot.OpenPath)
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("root image: %w", err)
			}
			if !pxe {
				return nil, nil
			}
			return s.one(osimage.KindRootfs, FileRootfs)
		},
		gives: s.stack, path: p,
	}
}

// pxe writes what a network boot takes besides the live initrd: the
// kernel, the initrd without root and the command line.
func (s *writerSet) pxe() *Writer {
	files := []string{filepath.Join(s.dir, FileKernel), filepath.Join(s.dir, FileNoRoot), filepath.Join(s.dir, FileCmdline)}
	return &Writer{
		Name: "pxe", Needs: []step.Handover{s.in.Kernel, s.in.NoRoot}, Files: files,
		Ships: []string{FileKernel, FileNoRoot, FileCmdline},
		Key: func() (string, error) {
			return s.key("pxe", s.kernel().Dir, s.in.NoRoot.Get(), s.cfg.Cmdline)
		},
		Size: func() int64 { return fileSize(s.kernel().Image()) + fileSize(s.in.NoRoot.Get()) },
		Write: func(ctx context.Context) ([]osimage.Artifact, error) {
			if err := s.d.concat(FileKernel, s.kernel().Image()); err != nil {
				return nil, fmt.Errorf("pxe: %w", err)
			}
			if err := s.d.concat(FileNoRoot, s.in.NoRoot.Get()); err != nil {
				return nil, fmt.Errorf("pxe: %w", err)
			}
			if err := s.d.write(FileCmdline, func(w io.Writer) error { _, err := io.WriteString(w, s.cfg.Cmdline+"\n"); return err }); err != nil {
				return nil, err
			}
			var arts []osimage.Artifact
			for _, f := range []struct {
				kind osimage.ArtifactKind
				name string
			}{{osimage.KindKernel, FileKernel}, {osimage.KindInitrdNoRoot, FileNoRoot}, {osimage.KindCmdline, FileCmdline}} {
				a, err := s.d.describe(f.kind, f.name)
				if err != nil {
					return nil, err
				}
				arts = append(arts, a)
			}
			return arts, nil
		},
	}
}

func (s *writerSet) images() images {
	return images{cfg: s.cfg, kernel: s.kernel, assembled: func() step.Assembled { return s.in.Assembled.Get() }}
}

// ukiSize estimates the UKI's bytes (and the ISO's), for progress.
func (s *writerSet) ukiSize() int64 {
	return fileSize(s.kernel().Image()) + fileSize(filepath.Join(s.dir, s.initrdName)) + fileSize(s.in.Assembled.Get().Stub())
}

// uki writes the UKI: the image's stub, the kernel, the live initrd and
// the command line.
func (s *writerSet) uki() *Writer {
	p := filepath.Join(s.dir, s.ukiName)
	ships := s.outputs(recipe.OutputUKI)
	return &Writer{
		Name: "uki", Needs: []step.Handover{s.live, s.in.Kernel, s.in.Assembled}, Files: []string{p}, Size: s.ukiSize,
		Ships: shipsIf(ships, FileUKI), Key: s.ukiKey,
		Write: func(ctx context.Context) ([]osimage.Artifact, error) {
			if err := s.images().writeUKI(s.d, s.ukiName, s.live.Get(), s.cfg.Cmdline); err != nil {
				return nil, fmt.Errorf("uki: %w", err)
			}
			if !ships {
				return nil, nil
			}
			return s.one(osimage.KindUKI, FileUKI)
		},
		gives: s.efi, path: p,
	}
}

// stub writes the image's systemd-stub as stub.efi, the one the UKIs are
// made of: readers that assemble their own UKI from the kernel and the
// initrd (IronCore Image V2's UKI kind) take it. With pxe as with uki:
// the V2 UKI kind is made of pxe's kernel and initrd.
func (s *writerSet) stub() *Writer {
	p := filepath.Join(s.dir, FileStub)
	return &Writer{
		Name: "stub", Needs: []step.Handover{s.in.Assembled}, Files: []string{p},
		Ships: []string{FileStub},
		Key: func() (string, error) {
			return s.key("stub", s.in.Assembled.Get().Dir, s.cfg.Arch)
		},
		Size: func() int64 { return fileSize(s.in.Assembled.Get().Stub()) },
		Write: func(ctx context.Context) ([]osimage.Artifact, error) {
			src := s.in.Assembled.Get().Stub()
			if err := checkStub(src, s.cfg.Arch); err != nil {
				return nil, fmt.Errorf("stub: %w", err)
			}
			if err := s.d.concat(FileStub, src); err != nil {
				return nil, fmt.Errorf("stub: %w", err)
			}
			return s.one(osimage.KindStub, FileStub)
		},
	}
}

// checkStub refuses a stub that is no PE image of arch's machine, as the
// UKI writer does (uki.Options.Machine): a reader would assemble a UKI
// its firmware cannot start.
func checkStub(path, arch string) error {
	r, err := fsroot.OpenPath(path)
	if err != nil {
		return fmt.Errorf("no systemd-stub in the image (package systemd-boot-efi): %w", err)
	}
	defer r.Close()
	f, err := pe.NewFile(r)
	if err != nil {
		return fmt.Errorf("no systemd-stub in the image (package systemd-boot-efi): %w", err)
	}
	if want := uki.MachineFor(arch); want != 0 && f.Machine != want {
		return fmt.Errorf("%s is built for PE machine %#x, %s takes %#x", path, f.Machine, arch, want)
	}
	return nil
}

// disk writes the GPT disk: an ESP with a UKI that boots the initrd
// without root, the root stack as its root partition, an empty data
// partition.
func (s *writerSet) disk() *Writer {
	p := filepath.Join(s.dir, FileDisk)
	return &Writer{
		Name: "disk", Needs: []step.Handover{s.stack, s.in.Kernel, s.in.Assembled, s.in.NoRoot}, Files: []string{p, p + ".uki.tmp"},
		Ships: []string{FileDisk},
		Key: func() (string, error) {
			k, err := s.rootKey()
			if err != nil {
				return "", err
			}
			cfg := s.cfg
			return s.key("disk", k, s.kernel().Dir, s.in.Assembled.Get().Dir, s.in.NoRoot.Get(), diskCmdline(cfg.Cmdline), strconv.FormatInt(cfg.DataMiB, 10),
				cfg.Name, cfg.Version, cfg.Arch, s.epoch, s.signer)
		},
		// What it writes: its UKI (kernel, initrd without root) and the
		// root stack; the data partition is mostly holes.
		Size: func() int64 {
			return fileSize(s.kernel().Image()) + fileSize(s.in.NoRoot.Get()) + fileSize(filepath.Join(s.dir, s.rootName))
		},
		Write: func(ctx context.Context) ([]osimage.Artifact, error) {
			if err := s.images().writeDisk(s.d, FileDisk, s.stack.Get(), s.in.NoRoot.Get()); err != nil {
				return nil, fmt.Errorf("disk: %w", err)
			}
			return s.one(osimage.KindDisk, FileDisk)
		},
	}
}

// iso writes the ISO: the UKI the uki writer made, in an El Torito EFI
// boot image.
func (s *writerSet) iso() *Writer {
	p := filepath.Join(s.dir, FileISO)
	return &Writer{
		Name: "iso", Needs: []step.Handover{s.efi}, Files: []string{p}, Size: s.ukiSize,
		Ships: []string{FileISO},
		Key: func() (string, error) {
			k, err := s.ukiKey()
			if err != nil {
				return "", err
			}
			return s.key("iso", k, s.cfg.Arch, s.cfg.Name, s.cfg.Version, s.epoch)
		},
		Write: func(ctx context.Context) ([]osimage.Artifact, error) {
			err := s.d.writeFile(FileISO, func(f *os.File) (string, error) {
				return isoimage.WriteInto(f, isoimage.Options{
					Architecture:    s.cfg.Arch,
					UKI:             s.efi.Get(),
					VolumeLabel:     isoVolumeLabel(s.cfg.Name),
					Seed:            s.cfg.Name + "/" + s.cfg.Version,
					SourceDateEpoch: s.cfg.Epoch,
				})
			})
			if err != nil {
				return nil, fmt.Errorf("iso: %w", err)
			}
			return s.one(osimage.KindISO, FileISO)
		},
	}
}

// writerVersion is part of every writer key: bump it when a writer's
// output changes for the same inputs (the builder's digest covers builds
// by another builder).
const writerVersion = "1"

// writerKey digests a writer's inputs.
func writerKey(builder, name string, parts ...string) (string, error) {
	if builder == "" {
		return "", errors.New("writer key: no builder digest")
	}
	var in cache.Inputs
	in.Add("writer", name+"/"+writerVersion)
	in.AddDigest("builder", builder)
	for i, p := range parts {
		in.Add(strconv.Itoa(i), p)
	}
	return in.Key(), nil
}

// signerID names the Secure Boot signer by its certificate (which binds
// its key); "" when unsigned.
func signerID(cert *x509.Certificate) string {
	if cert == nil {
		return ""
	}
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// diskCmdline points the disk UKI's init at the root partition.
func diskCmdline(line string) string {
	return strings.TrimSpace(cmdline.Cmdline{Root: "partlabel:" + diskimage.LabelRoot}.String() + " " + line)
}

// RemoveAside deletes the files writers put aside for other writers.
func RemoveAside(dir string) error {
	for _, name := range []string{asideInitrd, asideRoot, asideUKI} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// artifactOrder is the manifest's order of artifact kinds, whatever order
// the writers finished in.
var artifactOrder = []osimage.ArtifactKind{
	osimage.KindKernel, osimage.KindInitrd, osimage.KindRootfs, osimage.KindInitrdNoRoot,
	osimage.KindCmdline, osimage.KindUKI, osimage.KindStub, osimage.KindDisk, osimage.KindISO,
}

// Sort puts arts in the manifest's order.
func Sort(arts []osimage.Artifact) {
	slices.SortStableFunc(arts, func(a, b osimage.Artifact) int {
		return slices.Index(artifactOrder, a.Kind) - slices.Index(artifactOrder, b.Kind)
	})
}

// fileSize is a step output's size, for progress: a symlink's own (the
// writers do not follow one out of its step's directory).
func fileSize(p string) int64 {
	fi, err := os.Lstat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}
