package builder

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/isoimage"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/uki"
)

// outputSet is the artifacts a recipe asks for.
type outputSet map[string]bool

var knownOutputs = []string{"pxe", "uki", "disk", "iso"}

func parseOutputs(names []string) (outputSet, error) {
	if len(names) == 0 {
		names = []string{"pxe"}
	}
	set := outputSet{}
	for _, n := range names {
		ok := false
		for _, k := range knownOutputs {
			ok = ok || n == k
		}
		if !ok {
			return nil, fmt.Errorf("outputs: unknown output %q (want one of %s)", n, strings.Join(knownOutputs, ", "))
		}
		set[n] = true
	}
	return set, nil
}

// needsStub: UKI-based artifacts need systemd-stub from the image itself,
// so that stub and kernel come from the same release.
func (o outputSet) needsStub() bool { return o["uki"] || o["disk"] || o["iso"] }

// artifactInputs is what the artifact writers read.
type artifactInputs struct {
	assembled     string // assemble step output (kernel, root image, stub, ...)
	initrd        string // the live initrd, root image inside
	noRootInitrd  string // the initrd without root image (disk boots, installs)
	cmdline       string
	epoch         int64
	name, version string
	arch          string
	dataMiB       int64 // disk.raw's osb-data partition, 0: none
	signer        crypto.Signer
	cert          *x509.Certificate
}

func (a *artifactInputs) kernel() string    { return filepath.Join(a.assembled, kernelImage) }
func (a *artifactInputs) rootImage() string { return filepath.Join(a.assembled, rootImage) }

// diskCmdline points the disk UKI's init at the root partition.
func (a *artifactInputs) diskCmdline() string {
	return strings.TrimSpace("osb.root=partlabel:" + diskimage.LabelRoot + " " + a.cmdline)
}

// Artifact file names in an output directory.
const (
	fileKernel  = "vmlinuz"
	fileInitrd  = "initrd.img"
	fileNoRoot  = "initrd-noroot.img"
	fileRootfs  = "root.squashfs"
	fileCmdline = "cmdline"
	fileUKI     = "uki.efi"
	fileDisk    = "disk.raw"
	fileISO     = "image.iso"
)

// artifactWriter writes some artifacts of an output directory. The build
// runs the writers as steps of its graph, each once the steps (or writers)
// it needs are done; writeArtifacts runs them one after another.
type artifactWriter struct {
	name  string
	needs []string // steps and writers whose outputs it reads
	files []string // what it writes, for progress
	// size estimates the bytes it writes, for progress.
	size  func() int64
	write func(ctx context.Context) ([]osimage.Artifact, error)
}

// artifactWriters are the writers of the chosen artifacts into dir, in
// manifest order. The ISO carries the UKI the uki writer made.
func artifactWriters(out outputSet, in *artifactInputs, dir string) []artifactWriter {
	var ws []artifactWriter
	describe := func(kind osimage.ArtifactKind, name string) (osimage.Artifact, error) {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return osimage.Artifact{}, err
		}
		d, err := digestFile(p)
		if err != nil {
			return osimage.Artifact{}, err
		}
		return osimage.Artifact{Kind: kind, Path: name, Size: fi.Size(), SHA256: d}, nil
	}
	if out["pxe"] {
		type copied struct {
			kind osimage.ArtifactKind
			src  func() string
			name string
		}
		files := []copied{
			{osimage.KindKernel, in.kernel, fileKernel},
			{osimage.KindInitrd, func() string { return in.initrd }, fileInitrd},
			{osimage.KindRootfs, in.rootImage, fileRootfs},
			{osimage.KindInitrdNoRoot, func() string { return in.noRootInitrd }, fileNoRoot},
		}
		w := artifactWriter{name: "pxe", needs: []string{"assemble", "initrd", "initrd-noroot"}}
		for _, f := range files {
			w.files = append(w.files, filepath.Join(dir, f.name))
		}
		w.size = func() int64 {
			var n int64
			for _, f := range files {
				n += fileSize(f.src())
			}
			return n
		}
		w.write = func(ctx context.Context) ([]osimage.Artifact, error) {
			var arts []osimage.Artifact
			for _, f := range files {
				if err := copyFile(f.src(), filepath.Join(dir, f.name), 0o644); err != nil {
					return nil, fmt.Errorf("pxe: %w", err)
				}
				a, err := describe(f.kind, f.name)
				if err != nil {
					return nil, err
				}
				arts = append(arts, a)
			}
			if err := os.WriteFile(filepath.Join(dir, fileCmdline), []byte(in.cmdline+"\n"), 0o644); err != nil {
				return nil, err
			}
			a, err := describe(osimage.KindCmdline, fileCmdline)
			if err != nil {
				return nil, err
			}
			return append(arts, a), nil
		}
		ws = append(ws, w)
	}
	// The ISO boots the same UKI; the uki writer puts it aside when only
	// the ISO wants it, and the ISO writer removes it.
	ukiPath := filepath.Join(dir, fileUKI)
	if !out["uki"] && out["iso"] {
		ukiPath = filepath.Join(dir, ".iso-uki.efi")
	}
	ukiSize := func() int64 {
		return fileSize(in.kernel()) + fileSize(in.initrd) + fileSize(filepath.Join(in.assembled, stubFile))
	}
	if out["uki"] || out["iso"] {
		ws = append(ws, artifactWriter{
			name: "uki", needs: []string{"assemble", "initrd"}, files: []string{ukiPath}, size: ukiSize,
			write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if err := in.writeUKI(ukiPath, in.initrd, in.cmdline); err != nil {
					return nil, fmt.Errorf("uki: %w", err)
				}
				if !out["uki"] {
					return nil, nil
				}
				a, err := describe(osimage.KindUKI, fileUKI)
				return []osimage.Artifact{a}, err
			},
		})
	}
	if out["disk"] {
		p := filepath.Join(dir, fileDisk)
		ws = append(ws, artifactWriter{
			name: "disk", needs: []string{"assemble", "initrd-noroot"}, files: []string{p, p + ".uki.tmp"},
			size: func() int64 {
				return fileSize(in.kernel()) + fileSize(in.noRootInitrd) + fileSize(in.rootImage()) + in.dataMiB<<20
			},
			write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if err := in.writeDisk(p); err != nil {
					return nil, fmt.Errorf("disk: %w", err)
				}
				a, err := describe(osimage.KindDisk, fileDisk)
				return []osimage.Artifact{a}, err
			},
		})
	}
	if out["iso"] {
		p := filepath.Join(dir, fileISO)
		ws = append(ws, artifactWriter{
			name: "iso", needs: []string{"uki"}, files: []string{p}, size: ukiSize,
			write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if !out["uki"] {
					defer os.Remove(ukiPath)
				}
				err := isoimage.Write(p, isoimage.Options{
					Architecture:    in.arch,
					UKI:             ukiPath,
					VolumeLabel:     isoVolumeLabel(in.name),
					Seed:            in.name + "/" + in.version,
					SourceDateEpoch: in.epoch,
				})
				if err != nil {
					return nil, fmt.Errorf("iso: %w", err)
				}
				a, err := describe(osimage.KindISO, fileISO)
				return []osimage.Artifact{a}, err
			},
		})
	}
	return ws
}

// writeArtifacts writes the chosen artifacts into dir one after another
// and describes them.
func writeArtifacts(ctx context.Context, out outputSet, in *artifactInputs, dir string) ([]osimage.Artifact, error) {
	var arts []osimage.Artifact
	for _, w := range artifactWriters(out, in, dir) {
		a, err := w.write(ctx)
		if err != nil {
			return nil, err
		}
		arts = append(arts, a...)
	}
	return arts, nil
}

func fileSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// writeUKI joins systemd-stub from the image with its kernel, an initrd and
// a command line.
func (a *artifactInputs) writeUKI(path, initrdPath, cmdline string) error {
	stub, err := os.ReadFile(filepath.Join(a.assembled, stubFile))
	if err != nil {
		return fmt.Errorf("no systemd-stub in the image (package systemd-boot-efi): %w", err)
	}
	kernel, err := os.ReadFile(a.kernel())
	if err != nil {
		return err
	}
	initrd, err := os.ReadFile(initrdPath)
	if err != nil {
		return err
	}
	osr, err := os.ReadFile(filepath.Join(a.assembled, osReleaseFile))
	if err != nil {
		return err
	}
	kver, err := readKernelRelease(a.assembled)
	if err != nil {
		return err
	}
	return uki.BuildFile(path, uki.Options{
		Stub: stub, Kernel: kernel, Initrd: initrd, Cmdline: cmdline,
		OSRelease: string(osr), Uname: kver, SourceDateEpoch: a.epoch,
		Signer: a.signer, Certificate: a.cert,
	})
}

// writeDisk makes the GPT disk: its UKI boots a slim initrd that takes the
// root image from the osb-root partition instead of carrying it, and the
// empty osb-data partition after it makes the file boot as built.
func (a *artifactInputs) writeDisk(path string) error {
	ukiPath := path + ".uki.tmp"
	defer os.Remove(ukiPath)
	if err := a.writeUKI(ukiPath, a.noRootInitrd, a.diskCmdline()); err != nil {
		return err
	}
	return diskimage.Write(path, diskimage.Options{
		Architecture:    a.arch,
		UKI:             ukiPath,
		Root:            a.rootImage(),
		DataSizeMiB:     a.dataMiB,
		Seed:            a.name + "/" + a.version,
		SourceDateEpoch: a.epoch,
	})
}

// isoVolumeLabel is the recipe name as an ISO 9660 volume identifier.
func isoVolumeLabel(name string) string {
	label := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			return r
		}
		return '_'
	}, name)
	if len(label) > 32 {
		label = label[:32]
	}
	if label == "" {
		label = "OSB"
	}
	return label
}

// ErrOutputNotOurs is why an output directory is refused: a build replaces
// the directory and deletes what it held, so it may only replace a missing
// or empty directory or an earlier output of this builder.
var ErrOutputNotOurs = errors.New("not an earlier output of this builder")

// OutputDirError is an output directory a build refuses to replace.
type OutputDirError struct {
	Dir    string
	Reason string
}

func (e *OutputDirError) Error() string {
	return fmt.Sprintf("output %s: %s; refusing to replace it (that would delete what it holds): name a new or empty directory", e.Dir, e.Reason)
}

func (e *OutputDirError) Unwrap() error { return ErrOutputNotOurs }

// maxManifestSize bounds manifest.json; a real one is tens of KiB.
const maxManifestSize = 16 << 20

// CheckOutputDir returns an *OutputDirError unless dir is missing, an empty
// directory or an earlier output of this builder: a directory whose
// manifest.json is a build manifest listing every other file in it. Files
// the manifest does not list would be lost, so they make it refuse too.
func CheckOutputDir(dir string) error {
	info, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("output %s: %w", dir, err)
	}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		return &OutputDirError{Dir: dir, Reason: "is a symlink, " + ErrOutputNotOurs.Error()}
	case !info.IsDir():
		return &OutputDirError{Dir: dir, Reason: "is not a directory"}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("output %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return nil
	}
	listed, err := readOutputManifest(filepath.Join(dir, osimage.ManifestFile))
	if err != nil {
		return &OutputDirError{Dir: dir, Reason: fmt.Sprintf("holds %s and %v, so it is %v", someNames(entries, nil), err, ErrOutputNotOurs)}
	}
	listed = append(listed, osimage.ManifestFile)
	if extra := someNames(entries, listed); extra != "" {
		return &OutputDirError{Dir: dir, Reason: "is an earlier output but also holds " + extra + ", which its manifest does not list"}
	}
	return nil
}

// readOutputManifest reads the manifest of an earlier output and returns
// the file names it lists. It fails unless the file is a build manifest
// naming its artifacts as plain file names.
func readOutputManifest(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s", osimage.ManifestFile)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", osimage.ManifestFile)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxManifestSize+1))
	if err != nil {
		return nil, err
	}
	return parseOutputManifest(data)
}

// parseOutputManifest checks that data is a build manifest (see
// readOutputManifest) and returns the artifact file names.
func parseOutputManifest(data []byte) ([]string, error) {
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("%s larger than %d bytes", osimage.ManifestFile, maxManifestSize)
	}
	var m osimage.BuildManifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s that is not a build manifest: %w", osimage.ManifestFile, err)
	}
	if m.Recipe == "" || len(m.Artifacts) == 0 {
		return nil, fmt.Errorf("%s that is not a build manifest (no recipe or artifacts)", osimage.ManifestFile)
	}
	var names []string
	for _, a := range m.Artifacts {
		if a.Path == "" || a.Path == "." || a.Path == ".." || a.Path == osimage.ManifestFile || strings.ContainsAny(a.Path, "/\x00") {
			return nil, fmt.Errorf("%s that is not a build manifest (artifact path %q)", osimage.ManifestFile, a.Path)
		}
		names = append(names, a.Path)
	}
	return names, nil
}

// someNames names the entries not in except, at most three of them, for
// messages; "" when there are none.
func someNames(entries []fs.DirEntry, except []string) string {
	var names []string
	for _, e := range entries {
		if !slices.Contains(except, e.Name()) {
			names = append(names, fmt.Sprintf("%q", e.Name()))
		}
	}
	switch {
	case len(names) == 0:
		return ""
	case len(names) > 3:
		return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
	}
	return strings.Join(names, ", ")
}
