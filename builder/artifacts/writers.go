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
	"github.com/ironcore-dev/os-builder/initrd/rootstack"
	"github.com/ironcore-dev/os-builder/isoimage"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
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
	d := newArtifactDir(dir)
	out := cfg.Outputs
	var ws []*Writer
	one := func(kind osimage.ArtifactKind, name string) ([]osimage.Artifact, error) {
		a, err := d.describe(kind, name)
		if err != nil {
			return nil, err
		}
		return []osimage.Artifact{a}, nil
	}
	shipsIf := func(ok bool, names ...string) []string {
		if !ok {
			return nil
		}
		return names
	}
	aside := func(ok bool, name, other string) string {
		if ok {
			return name
		}
		return other
	}
	kernel := func() step.Kernel { return in.Kernel.Get() }
	rootLayers := func() []string { return in.Stack.Get().Images() }
	epoch := strconv.FormatInt(cfg.Epoch, 10)
	signer := signerID(cfg.Cert)
	key := func(name string, parts ...string) (string, error) { return writerKey(cfg.Builder, name, parts...) }
	// Writer keys name the cache entries a writer reads by path: an
	// entry's directory is named by its key.
	initrdKey := func() (string, error) {
		return key("initrd", append(rootLayers(), in.NoRoot.Get(), epoch)...)
	}
	rootKey := func() (string, error) { return key("root", rootLayers()...) }
	ukiKey := func() (string, error) {
		k, err := initrdKey()
		if err != nil {
			return "", err
		}
		return key("uki", k, kernel().Dir, in.Assembled.Get().Dir, cfg.Cmdline, epoch, signer)
	}
	initrdName := aside(out[recipe.OutputPXE], FileInitrd, asideInitrd)
	rootName := aside(out[recipe.OutputPXE], FileRootfs, asideRoot)
	ukiName := aside(out[recipe.OutputUKI] || !out[recipe.OutputISO], FileUKI, asideUKI)
	live := step.NewValue[string]("initrd", "the live initrd")
	stack := step.NewValue[string]("root", "the root stack")
	efi := step.NewValue[string]("uki", "the UKI")

	if out[recipe.OutputPXE] || out[recipe.OutputUKI] || out[recipe.OutputISO] {
		p := filepath.Join(dir, initrdName)
		ws = append(ws, &Writer{
			Name: "initrd", Needs: []step.Handover{in.Stack, in.NoRoot}, Files: []string{p},
			Ships: shipsIf(out[recipe.OutputPXE], FileInitrd), Key: initrdKey,
			Size: func() int64 { return liveInitrdSize(in.Stack.Get(), in.NoRoot.Get()) },
			Write: func(ctx context.Context) ([]osimage.Artifact, error) {
				err := d.write(initrdName, func(w io.Writer) error {
					return writeLiveInitrd(w, in.Stack.Get(), in.NoRoot.Get(), cfg.Epoch)
				})
				if err != nil {
					return nil, fmt.Errorf("initrd: %w", err)
				}
				if !out[recipe.OutputPXE] {
					return nil, nil
				}
				return one(osimage.KindInitrd, FileInitrd)
			},
			gives: live, path: p,
		})
	}
	if out[recipe.OutputPXE] || out[recipe.OutputDisk] {
		p := filepath.Join(dir, rootName)
		ws = append(ws, &Writer{
			Name: "root", Needs: []step.Handover{in.Stack}, Files: []string{p},
			Ships: shipsIf(out[recipe.OutputPXE], FileRootfs), Key: rootKey,
			Size: func() int64 {
				var n int64
				for _, l := range rootLayers() {
					n += fileSize(l)
				}
				return n
			},
			Write: func(ctx context.Context) ([]osimage.Artifact, error) {
				err := d.write(rootName, func(w io.Writer) error {
					_, err := rootstack.Write(w, rootLayers())
					return err
				})
				if err != nil {
					return nil, fmt.Errorf("root image: %w", err)
				}
				if !out[recipe.OutputPXE] {
					return nil, nil
				}
				return one(osimage.KindRootfs, FileRootfs)
			},
			gives: stack, path: p,
		})
	}
	if out[recipe.OutputPXE] {
		files := []string{filepath.Join(dir, FileKernel), filepath.Join(dir, FileNoRoot), filepath.Join(dir, FileCmdline)}
		ws = append(ws, &Writer{
			Name: "pxe", Needs: []step.Handover{in.Kernel, in.NoRoot}, Files: files,
			Ships: []string{FileKernel, FileNoRoot, FileCmdline},
			Key: func() (string, error) {
				return key("pxe", kernel().Dir, in.NoRoot.Get(), cfg.Cmdline)
			},
			Size: func() int64 { return fileSize(kernel().Image()) + fileSize(in.NoRoot.Get()) },
			Write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if err := d.concat(FileKernel, kernel().Image()); err != nil {
					return nil, fmt.Errorf("pxe: %w", err)
				}
				if err := d.concat(FileNoRoot, in.NoRoot.Get()); err != nil {
					return nil, fmt.Errorf("pxe: %w", err)
				}
				if err := d.write(FileCmdline, func(w io.Writer) error { _, err := io.WriteString(w, cfg.Cmdline+"\n"); return err }); err != nil {
					return nil, err
				}
				var arts []osimage.Artifact
				for _, f := range []struct {
					kind osimage.ArtifactKind
					name string
				}{{osimage.KindKernel, FileKernel}, {osimage.KindInitrdNoRoot, FileNoRoot}, {osimage.KindCmdline, FileCmdline}} {
					a, err := d.describe(f.kind, f.name)
					if err != nil {
						return nil, err
					}
					arts = append(arts, a)
				}
				return arts, nil
			},
		})
	}
	img := images{cfg: cfg, kernel: kernel, assembled: func() step.Assembled { return in.Assembled.Get() }}
	ukiPath := filepath.Join(dir, ukiName)
	ukiSize := func() int64 {
		return fileSize(kernel().Image()) + fileSize(filepath.Join(dir, initrdName)) + fileSize(in.Assembled.Get().Stub())
	}
	if out[recipe.OutputUKI] || out[recipe.OutputISO] {
		ws = append(ws, &Writer{
			Name: "uki", Needs: []step.Handover{live, in.Kernel, in.Assembled}, Files: []string{ukiPath}, Size: ukiSize,
			Ships: shipsIf(out[recipe.OutputUKI], FileUKI), Key: ukiKey,
			Write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if err := img.writeUKI(d, ukiName, live.Get(), cfg.Cmdline); err != nil {
					return nil, fmt.Errorf("uki: %w", err)
				}
				if !out[recipe.OutputUKI] {
					return nil, nil
				}
				return one(osimage.KindUKI, FileUKI)
			},
			gives: efi, path: ukiPath,
		})
	}
	if out[recipe.OutputDisk] {
		p := filepath.Join(dir, FileDisk)
		ws = append(ws, &Writer{
			Name: "disk", Needs: []step.Handover{stack, in.Kernel, in.Assembled, in.NoRoot}, Files: []string{p, p + ".uki.tmp"},
			Ships: []string{FileDisk},
			Key: func() (string, error) {
				k, err := rootKey()
				if err != nil {
					return "", err
				}
				return key("disk", k, kernel().Dir, in.Assembled.Get().Dir, in.NoRoot.Get(), diskCmdline(cfg.Cmdline), strconv.FormatInt(cfg.DataMiB, 10),
					cfg.Name, cfg.Version, cfg.Arch, epoch, signer)
			},
			// What it writes: its UKI (kernel, initrd without root) and
			// the root stack; the data partition is mostly holes.
			Size: func() int64 {
				return fileSize(kernel().Image()) + fileSize(in.NoRoot.Get()) + fileSize(filepath.Join(dir, rootName))
			},
			Write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if err := img.writeDisk(d, FileDisk, stack.Get(), in.NoRoot.Get()); err != nil {
					return nil, fmt.Errorf("disk: %w", err)
				}
				return one(osimage.KindDisk, FileDisk)
			},
		})
	}
	if out[recipe.OutputISO] {
		p := filepath.Join(dir, FileISO)
		ws = append(ws, &Writer{
			Name: "iso", Needs: []step.Handover{efi}, Files: []string{p}, Size: ukiSize,
			Ships: []string{FileISO},
			Key: func() (string, error) {
				k, err := ukiKey()
				if err != nil {
					return "", err
				}
				return key("iso", k, cfg.Arch, cfg.Name, cfg.Version, epoch)
			},
			Write: func(ctx context.Context) ([]osimage.Artifact, error) {
				err := d.writeFile(FileISO, func(f *os.File) (string, error) {
					return isoimage.WriteInto(f, isoimage.Options{
						Architecture:    cfg.Arch,
						UKI:             efi.Get(),
						VolumeLabel:     isoVolumeLabel(cfg.Name),
						Seed:            cfg.Name + "/" + cfg.Version,
						SourceDateEpoch: cfg.Epoch,
					})
				})
				if err != nil {
					return nil, fmt.Errorf("iso: %w", err)
				}
				return one(osimage.KindISO, FileISO)
			},
		})
	}
	return ws
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
func diskCmdline(cmdline string) string {
	return strings.TrimSpace("osb.root=partlabel:" + diskimage.LabelRoot + " " + cmdline)
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
	osimage.KindCmdline, osimage.KindUKI, osimage.KindDisk, osimage.KindISO,
}

// Sort puts arts in the manifest's order.
func Sort(arts []osimage.Artifact) {
	slices.SortStableFunc(arts, func(a, b osimage.Artifact) int {
		return slices.Index(artifactOrder, a.Kind) - slices.Index(artifactOrder, b.Kind)
	})
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}
