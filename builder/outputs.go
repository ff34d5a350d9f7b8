package builder

import (
	"bufio"
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/initrd/rootstack"
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
	layers        []rootLayer // bottom first: bootstrap, [binaries,] assemble
	assembled     string      // assemble step output (stub, os-release, ...)
	kernelDir     string      // kernel step output (kernel, its release)
	noRootInitrd  string      // the initrd without root image (disk boots, installs)
	cmdline       string
	epoch         int64
	name, version string
	arch          string
	dataMiB       int64 // disk.raw's osb-data partition, 0: none
	signer        crypto.Signer
	cert          *x509.Certificate
}

func (a *artifactInputs) kernel() string { return filepath.Join(a.kernelDir, kernelImage) }

// rootLayers are the root's images, bottom first (the root stack's parts).
func (a *artifactInputs) rootLayers() []string { return layerImages(layerDirs(a.layers)) }

// writeLiveInitrd writes the live initrd: the root's layers as
// uncompressed cpio segments (the kernel reads them first, then the
// compressed one), then the initrd without root.
func (a *artifactInputs) writeLiveInitrd(w io.Writer) error {
	for _, l := range a.layers {
		if err := encodeLayerSegment(w, l, a.epoch); err != nil {
			return err
		}
	}
	f, err := os.Open(a.noRootInitrd)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// liveInitrdSize estimates writeLiveInitrd's bytes, for progress.
func (a *artifactInputs) liveInitrdSize() int64 {
	n := fileSize(a.noRootInitrd)
	for _, l := range a.layers {
		n += fileSize(l.image()) + 1024 // the segment's cpio headers
	}
	return n
}

// signerID names the Secure Boot signer by its certificate (which binds
// its key); "" when unsigned.
func (a *artifactInputs) signerID() string {
	if a.cert == nil {
		return ""
	}
	sum := sha256.Sum256(a.cert.Raw)
	return hex.EncodeToString(sum[:])
}

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

// artifactDir writes artifact files into one directory, hashing them while
// they are written, so that the manifest needs no second read. Writers run
// concurrently (see artifactWriters).
type artifactDir struct {
	dir  string
	mu   sync.Mutex
	sums map[string]string // file name -> hex sha256, for files written here
}

func newArtifactDir(dir string) *artifactDir {
	return &artifactDir{dir: dir, sums: map[string]string{}}
}

func (d *artifactDir) setSum(name, sum string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sums[name] = sum
}

// write creates name and fills it through fill, hashing what it writes.
func (d *artifactDir) write(name string, fill func(w io.Writer) error) (err error) {
	f, err := os.OpenFile(filepath.Join(d.dir, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	if err := fill(bw); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	d.setSum(name, hex.EncodeToString(h.Sum(nil)))
	return nil
}

// writeFile creates name and has fill write it (at any offsets) and
// return its sha256. Like write, it neither syncs nor renames: the
// directory is published whole (and its artifacts are sealed) once every
// writer is done; a failed writer leaves nothing.
func (d *artifactDir) writeFile(name string, fill func(f *os.File) (string, error)) (err error) {
	p := filepath.Join(d.dir, name)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(p)
		}
	}()
	sum, err := fill(f)
	if err != nil {
		return err
	}
	d.setSum(name, sum)
	return nil
}

// concat writes the files srcs, one after the other, as name.
func (d *artifactDir) concat(name string, srcs ...string) error {
	return d.write(name, func(w io.Writer) error {
		for _, src := range srcs {
			f, err := os.Open(src)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("copy %s: %w", src, err)
			}
		}
		return nil
	})
}

// describe returns the manifest entry of name: the digest taken while it
// was written, or, for files other writers made, read once.
func (d *artifactDir) describe(kind osimage.ArtifactKind, name string) (osimage.Artifact, error) {
	p := filepath.Join(d.dir, name)
	fi, err := os.Stat(p)
	if err != nil {
		return osimage.Artifact{}, err
	}
	d.mu.Lock()
	sum, ok := d.sums[name]
	d.mu.Unlock()
	if !ok {
		if sum, err = digestFile(p); err != nil {
			return osimage.Artifact{}, err
		}
	}
	return osimage.Artifact{Kind: kind, Path: name, Size: fi.Size(), SHA256: sum}, nil
}

// artifactWriter writes some files of an output directory. The build runs
// the writers as steps of its graph, each once the steps and writers it
// needs are done; writeArtifacts runs them one after another.
type artifactWriter struct {
	name  string
	needs []string // steps and writers whose outputs it reads
	files []string // what it writes, for progress
	// size estimates the bytes it writes, for progress.
	size  func() int64
	write func(ctx context.Context) ([]osimage.Artifact, error)
	// ships are the files it writes that the output keeps (nil when it
	// writes only for other writers); key digests its inputs: together
	// they let a build reuse the files of an earlier output (reuse.go).
	ships []string
	key   func() (string, error)
}

// Files written aside in the staging directory when no chosen output
// ships them, removed once the writers that read them are done
// (removeAside).
const (
	asideInitrd = ".live-initrd.img"
	asideRoot   = ".root-stack.img"
	asideUKI    = ".iso-uki.efi"
)

// artifactWriters are the writers of the chosen artifacts into dir. The
// live initrd and the root stack are artifacts of pxe and inputs of the
// UKI and the disk: written once, aside when pxe does not ship them; the
// ISO carries the UKI the uki writer made.
func artifactWriters(out outputSet, in *artifactInputs, dir string) []artifactWriter {
	d := newArtifactDir(dir)
	var ws []artifactWriter
	one := func(kind osimage.ArtifactKind, name string) ([]osimage.Artifact, error) {
		a, err := d.describe(kind, name)
		if err != nil {
			return nil, err
		}
		return []osimage.Artifact{a}, nil
	}
	initrdName, rootName := fileInitrd, fileRootfs
	if !out["pxe"] {
		initrdName, rootName = asideInitrd, asideRoot
	}
	layerSteps := []string{"kernel", "assemble", "initrd-noroot"}
	// Writer keys name the cache entries a writer reads by path: an
	// entry's directory is named by its key.
	initrdKey := func() (string, error) {
		return writerKey("initrd", append(in.rootLayers(), in.noRootInitrd, strconv.FormatInt(in.epoch, 10))...)
	}
	rootKey := func() (string, error) { return writerKey("root", in.rootLayers()...) }
	ukiKey := func() (string, error) {
		k, err := initrdKey()
		if err != nil {
			return "", err
		}
		return writerKey("uki", k, in.kernelDir, in.assembled, in.cmdline, strconv.FormatInt(in.epoch, 10), in.signerID())
	}
	shipsIf := func(ok bool, names ...string) []string {
		if !ok {
			return nil
		}
		return names
	}
	if out["pxe"] || out["uki"] || out["iso"] {
		p := filepath.Join(dir, initrdName)
		ws = append(ws, artifactWriter{
			name: "initrd", needs: layerSteps, files: []string{p},
			ships: shipsIf(out["pxe"], fileInitrd), key: initrdKey,
			size: in.liveInitrdSize,
			write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if err := d.write(initrdName, in.writeLiveInitrd); err != nil {
					return nil, fmt.Errorf("initrd: %w", err)
				}
				if !out["pxe"] {
					return nil, nil
				}
				return one(osimage.KindInitrd, fileInitrd)
			},
		})
	}
	if out["pxe"] || out["disk"] {
		p := filepath.Join(dir, rootName)
		ws = append(ws, artifactWriter{
			name: "root", needs: []string{"assemble"}, files: []string{p},
			ships: shipsIf(out["pxe"], fileRootfs), key: rootKey,
			size: func() int64 {
				var n int64
				for _, l := range in.rootLayers() {
					n += fileSize(l)
				}
				return n
			},
			write: func(ctx context.Context) ([]osimage.Artifact, error) {
				err := d.write(rootName, func(w io.Writer) error {
					_, err := rootstack.Write(w, in.rootLayers())
					return err
				})
				if err != nil {
					return nil, fmt.Errorf("root image: %w", err)
				}
				if !out["pxe"] {
					return nil, nil
				}
				return one(osimage.KindRootfs, fileRootfs)
			},
		})
	}
	if out["pxe"] {
		files := []string{filepath.Join(dir, fileKernel), filepath.Join(dir, fileNoRoot), filepath.Join(dir, fileCmdline)}
		ws = append(ws, artifactWriter{
			name: "pxe", needs: layerSteps, files: files,
			ships: []string{fileKernel, fileNoRoot, fileCmdline},
			key: func() (string, error) {
				return writerKey("pxe", in.kernelDir, in.noRootInitrd, in.cmdline)
			},
			size: func() int64 { return fileSize(in.kernel()) + fileSize(in.noRootInitrd) },
			write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if err := d.concat(fileKernel, in.kernel()); err != nil {
					return nil, fmt.Errorf("pxe: %w", err)
				}
				if err := d.concat(fileNoRoot, in.noRootInitrd); err != nil {
					return nil, fmt.Errorf("pxe: %w", err)
				}
				if err := d.write(fileCmdline, func(w io.Writer) error { _, err := io.WriteString(w, in.cmdline+"\n"); return err }); err != nil {
					return nil, err
				}
				var arts []osimage.Artifact
				for _, f := range []struct {
					kind osimage.ArtifactKind
					name string
				}{{osimage.KindKernel, fileKernel}, {osimage.KindInitrdNoRoot, fileNoRoot}, {osimage.KindCmdline, fileCmdline}} {
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
	// The ISO boots the same UKI; the uki writer puts it aside when only
	// the ISO wants it.
	ukiName := fileUKI
	if !out["uki"] && out["iso"] {
		ukiName = asideUKI
	}
	ukiPath := filepath.Join(dir, ukiName)
	ukiSize := func() int64 {
		return fileSize(in.kernel()) + fileSize(filepath.Join(dir, initrdName)) + fileSize(filepath.Join(in.assembled, stubFile))
	}
	if out["uki"] || out["iso"] {
		ws = append(ws, artifactWriter{
			name: "uki", needs: []string{"initrd"}, files: []string{ukiPath}, size: ukiSize,
			ships: shipsIf(out["uki"], fileUKI), key: ukiKey,
			write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if err := in.writeUKI(d, ukiName, filepath.Join(dir, initrdName), in.cmdline); err != nil {
					return nil, fmt.Errorf("uki: %w", err)
				}
				if !out["uki"] {
					return nil, nil
				}
				return one(osimage.KindUKI, fileUKI)
			},
		})
	}
	if out["disk"] {
		p := filepath.Join(dir, fileDisk)
		ws = append(ws, artifactWriter{
			name: "disk", needs: []string{"root", "initrd-noroot"}, files: []string{p, p + ".uki.tmp"},
			ships: []string{fileDisk},
			key: func() (string, error) {
				k, err := rootKey()
				if err != nil {
					return "", err
				}
				return writerKey("disk", k, in.kernelDir, in.assembled, in.noRootInitrd, in.diskCmdline(), strconv.FormatInt(in.dataMiB, 10),
					in.name, in.version, in.arch, strconv.FormatInt(in.epoch, 10), in.signerID())
			},
			// What it writes: its UKI (kernel, initrd without root) and
			// the root stack; the data partition is mostly holes.
			size: func() int64 {
				return fileSize(in.kernel()) + fileSize(in.noRootInitrd) + fileSize(filepath.Join(dir, rootName))
			},
			write: func(ctx context.Context) ([]osimage.Artifact, error) {
				if err := in.writeDisk(d, fileDisk, filepath.Join(dir, rootName)); err != nil {
					return nil, fmt.Errorf("disk: %w", err)
				}
				return one(osimage.KindDisk, fileDisk)
			},
		})
	}
	if out["iso"] {
		p := filepath.Join(dir, fileISO)
		ws = append(ws, artifactWriter{
			name: "iso", needs: []string{"uki"}, files: []string{p}, size: ukiSize,
			ships: []string{fileISO},
			key: func() (string, error) {
				k, err := ukiKey()
				if err != nil {
					return "", err
				}
				return writerKey("iso", k, in.arch, in.name, in.version, strconv.FormatInt(in.epoch, 10))
			},
			write: func(ctx context.Context) ([]osimage.Artifact, error) {
				err := d.writeFile(fileISO, func(f *os.File) (string, error) {
					return isoimage.WriteInto(f, isoimage.Options{
						Architecture:    in.arch,
						UKI:             ukiPath,
						VolumeLabel:     isoVolumeLabel(in.name),
						Seed:            in.name + "/" + in.version,
						SourceDateEpoch: in.epoch,
					})
				})
				if err != nil {
					return nil, fmt.Errorf("iso: %w", err)
				}
				return one(osimage.KindISO, fileISO)
			},
		})
	}
	return ws
}

// removeAside deletes the files writers put aside for other writers.
func removeAside(dir string) error {
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

func sortArtifacts(arts []osimage.Artifact) {
	slices.SortStableFunc(arts, func(a, b osimage.Artifact) int {
		return slices.Index(artifactOrder, a.Kind) - slices.Index(artifactOrder, b.Kind)
	})
}

// writeArtifacts writes the chosen artifacts into dir one after another
// and describes them.
func writeArtifacts(ctx context.Context, out outputSet, in *artifactInputs, dir string) (arts []osimage.Artifact, err error) {
	defer func() {
		if rerr := removeAside(dir); err == nil && rerr != nil {
			arts, err = nil, rerr
		}
	}()
	for _, w := range artifactWriters(out, in, dir) {
		a, err := w.write(ctx)
		if err != nil {
			return nil, err
		}
		arts = append(arts, a...)
	}
	sortArtifacts(arts)
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
func (a *artifactInputs) writeUKI(d *artifactDir, name, initrdPath, cmdline string) error {
	stub, err := os.ReadFile(filepath.Join(a.assembled, stubFile))
	if err != nil {
		return fmt.Errorf("no systemd-stub in the image (package systemd-boot-efi): %w", err)
	}
	kernel, err := os.ReadFile(a.kernel())
	if err != nil {
		return err
	}
	// Streamed, not read whole: the live initrd carries the root image.
	initrd, err := os.Open(initrdPath)
	if err != nil {
		return err
	}
	defer initrd.Close()
	fi, err := initrd.Stat()
	if err != nil {
		return err
	}
	osr, err := os.ReadFile(filepath.Join(a.assembled, osReleaseFile))
	if err != nil {
		return err
	}
	kver, err := readKernelRelease(a.kernelDir)
	if err != nil {
		return err
	}
	opts := uki.Options{
		Stub: stub, Kernel: kernel, InitrdReader: io.NewSectionReader(initrd, 0, fi.Size()), Cmdline: cmdline,
		OSRelease: string(osr), Uname: kver, SourceDateEpoch: a.epoch,
		Signer: a.signer, Certificate: a.cert,
	}
	// The output directory is swapped in whole or not at all, so the UKI
	// is written in place, hashed on the way.
	err = d.write(name, func(w io.Writer) error { _, err := uki.Write(w, opts); return err })
	if err != nil {
		os.Remove(filepath.Join(d.dir, name))
	}
	return err
}

// writeDisk makes the GPT disk: its UKI boots a slim initrd that takes the
// root image from the osb-root partition instead of carrying it, and the
// empty osb-data partition after it makes the file boot as built.
func (a *artifactInputs) writeDisk(d *artifactDir, name, rootStack string) error {
	path := filepath.Join(d.dir, name)
	ukiPath := path + ".uki.tmp"
	defer os.Remove(ukiPath)
	if err := a.writeUKI(d, filepath.Base(ukiPath), a.noRootInitrd, a.diskCmdline()); err != nil {
		return err
	}
	return d.writeFile(name, func(f *os.File) (string, error) {
		return diskimage.WriteInto(f, diskimage.Options{
			Architecture:    a.arch,
			UKI:             ukiPath,
			Root:            rootStack,
			DataSizeMiB:     a.dataMiB,
			Seed:            a.name + "/" + a.version,
			SourceDateEpoch: a.epoch,
		})
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
