package osimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/diskimage/qcow2"
	"github.com/ironcore-dev/os-builder/ocistore"
)

// V2Image is one V2 manifest of an output directory.
type V2Image struct {
	Kind  V2Kind
	Image v1.Image
}

// NewV2Images builds the V2 manifests of one output directory, in table
// order, for the kinds its artifacts make: UKI (kernel + initrd, and
// stub.efi when the output has it), EFI (uki.efi), Disk (disk.raw as
// qcow2). m is the parsed manifest.json of
// dir; nil reads it. Every file is checked against manifest.json's sha256:
// the initrd and the disk here (they are read to cut and convert them), the
// others while they stream, as in NewImage.
func NewV2Images(dir string, m *BuildManifest) ([]V2Image, error) {
	if m == nil {
		var err error
		if m, err = ReadManifest(dir); err != nil {
			return nil, err
		}
	}
	if m.Architecture == "" {
		return nil, fmt.Errorf("build manifest in %s has no architecture", dir)
	}
	byKind := map[ArtifactKind]Artifact{}
	for _, a := range m.Artifacts {
		byKind[a.Kind] = a
	}
	var out []V2Image
	for _, spec := range v2Specs {
		layers, cfg, err := v2Layers(dir, m, spec.Kind, byKind)
		if err != nil {
			return nil, fmt.Errorf("%s kind: %w", spec.Kind, err)
		}
		if layers == nil {
			continue
		}
		img, err := newV2Image(spec, m, cfg, layers)
		if err != nil {
			return nil, fmt.Errorf("%s kind: %w", spec.Kind, err)
		}
		out = append(out, V2Image{Kind: spec.Kind, Image: img})
	}
	return out, nil
}

// v2Layers returns the layers of one kind (nil when the output has not
// the artifacts for it) and its config.
func v2Layers(dir string, m *BuildManifest, kind V2Kind, byKind map[ArtifactKind]Artifact) ([]v2Layer, V2Config, error) {
	cfg := V2Config{Architecture: m.Architecture, OS: "linux"}
	switch kind {
	case V2UKI:
		kernel, okK := byKind[KindKernel]
		initrd, okI := byKind[KindInitrd]
		if !okK || !okI {
			return nil, cfg, nil
		}
		k, err := newFileLayer(dir, kernel)
		if err != nil {
			return nil, cfg, err
		}
		k.mediaType = V2MediaTypeKernel
		segs, err := initrdSegments(dir, initrd)
		if err != nil {
			return nil, cfg, err
		}
		cfg.Cmdline = m.Cmdline
		cfg.OSRelease = osReleaseText(m.OSRelease)
		layers := []v2Layer{{k, titled("kernel.efi")}}
		for i, s := range segs {
			layers = append(layers, v2Layer{s, titled(fmt.Sprintf("initrd-%d.cpio%s", i, s.extension()))})
		}
		// The stub the output's uki.efi was made of, last (the table's
		// place for it): optional in the IEP, so an output without one
		// (an older build) still makes the kind.
		if stub, ok := byKind[KindStub]; ok {
			l, err := newFileLayer(dir, stub)
			if err != nil {
				return nil, cfg, err
			}
			l.mediaType = V2MediaTypeStub
			layers = append(layers, v2Layer{l, titled("stub.efi")})
		}
		return layers, cfg, nil
	case V2EFI:
		a, ok := byKind[KindUKI]
		if !ok {
			return nil, cfg, nil
		}
		l, err := newFileLayer(dir, a)
		if err != nil {
			return nil, cfg, err
		}
		l.mediaType = V2MediaTypeEFIExecutable
		return []v2Layer{{l, titled(filepath.Base(a.Path))}}, cfg, nil
	case V2Disk:
		a, ok := byKind[KindDisk]
		if !ok {
			return nil, cfg, nil
		}
		l, err := newQcow2Layer(dir, a)
		if err != nil {
			return nil, cfg, err
		}
		return []v2Layer{{l, titled(strings.TrimSuffix(filepath.Base(a.Path), filepath.Ext(a.Path)) + ".qcow2")}}, cfg, nil
	}
	return nil, cfg, fmt.Errorf("no layers for kind %s", kind)
}

func titled(name string) map[string]string { return map[string]string{AnnotationTitle: name} }

type v2Layer struct {
	layer       partial.CompressedLayer
	annotations map[string]string
}

func newV2Image(spec V2Spec, m *BuildManifest, cfg V2Config, layers []v2Layer) (v1.Image, error) {
	img := &artifactImage{layers: map[v1.Hash]partial.CompressedLayer{}, configMediaType: types.MediaType(spec.ConfigMediaType)}
	var err error
	if img.rawConfig, err = json.Marshal(cfg); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	cfgDigest, _, err := v1.SHA256(bytes.NewReader(img.rawConfig))
	if err != nil {
		return nil, err
	}
	var descs []v1.Descriptor
	var mts []string
	for _, l := range layers {
		d, err := partial.Descriptor(l.layer)
		if err != nil {
			return nil, err
		}
		d.Annotations = l.annotations
		descs = append(descs, *d)
		mts = append(mts, string(d.MediaType))
		img.layers[d.Digest] = l.layer
	}
	if _, err := CheckV2Manifest(spec.ArtifactType, spec.ConfigMediaType, mts); err != nil {
		return nil, err // our own table and writer disagree: a bug
	}
	ann := map[string]string{
		AnnotationCreated:      time.Unix(m.SourceDateEpoch, 0).UTC().Format(time.RFC3339),
		AnnotationArchitecture: m.Architecture,
	}
	if m.Recipe != "" {
		ann[AnnotationRecipe] = m.Recipe
	}
	if m.Version != "" {
		ann[AnnotationRecipeVersion] = m.Version
	}
	manifest := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  spec.ArtifactType,
		Config:        v1.Descriptor{MediaType: types.MediaType(spec.ConfigMediaType), Size: int64(len(img.rawConfig)), Digest: cfgDigest},
		Layers:        descs,
		Annotations:   ann,
	}
	if img.rawManifest, err = json.Marshal(manifest); err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	return partial.CompressedToImage(img)
}

// osReleaseText renders os-release fields as the file's KEY="value" lines,
// sorted by key (manifest.json keeps them as a map, not as the file).
func osReleaseText(osr map[string]string) string {
	keys := make([]string, 0, len(osr))
	for k := range osr {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "=" + strconv.Quote(osr[k]) + "\n")
	}
	return b.String()
}

// maxInitrdSegments bounds how many archives an initrd is cut into.
const maxInitrdSegments = 64

// rangeLayer is a byte range of an artifact file: one archive of a
// concatenated initrd. It is a fileLayer read from off on.
type rangeLayer struct {
	fileLayer
	off int64
}

func (l *rangeLayer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }

func (l *rangeLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("open artifact: %w", err)
	}
	rc := struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, l.off, l.size), f}
	return ocistore.NewVerifyingReader(rc, fmt.Sprintf("%s[%d:+%d]", l.path, l.off, l.size), l.digest, l.size), nil
}

func (l *rangeLayer) extension() string {
	_, ext, _ := strings.Cut(string(l.mediaType), "+")
	if ext == "" {
		return ""
	}
	return "." + ext
}

// initrdSegments cuts an initrd into the archives the kernel unpacks one
// after the other: each plain newc cpio up to its TRAILER!!! entry and
// the zero padding after it, then, from the first compressed archive on,
// the rest as one layer (its end is known only by decompressing). The file
// is checked against manifest.json's sha256 while it is read.
func initrdSegments(dir string, a Artifact) ([]*rangeLayer, error) {
	fl, err := newFileLayer(dir, a)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fl.path)
	if err != nil {
		return nil, fmt.Errorf("initrd: %w", err)
	}
	defer f.Close()
	var bounds []int64
	for off := int64(0); off < a.Size; {
		if len(bounds) == maxInitrdSegments {
			return nil, fmt.Errorf("initrd %s: more than %d archives", a.Path, maxInitrdSegments)
		}
		bounds = append(bounds, off)
		var head [8]byte
		n, _ := f.ReadAt(head[:], off)
		mt, err := initrdMediaType(head[:n])
		if err != nil {
			return nil, fmt.Errorf("initrd %s at %d: %w", a.Path, off, err)
		}
		if mt != V2MediaTypeInitrd {
			break
		}
		if off, err = cpioEnd(f, off, a.Size); err != nil {
			return nil, fmt.Errorf("initrd %s: %w", a.Path, err)
		}
	}
	bounds = append(bounds, a.Size)
	whole := sha256.New()
	var segs []*rangeLayer
	for i := 0; i+1 < len(bounds); i++ {
		off, size := bounds[i], bounds[i+1]-bounds[i]
		var head [8]byte
		n, _ := f.ReadAt(head[:], off)
		mt, _ := initrdMediaType(head[:n])
		h := sha256.New()
		if _, err := io.Copy(io.MultiWriter(h, whole), io.NewSectionReader(f, off, size)); err != nil {
			return nil, fmt.Errorf("initrd %s: %w", a.Path, err)
		}
		segs = append(segs, &rangeLayer{off: off, fileLayer: fileLayer{path: fl.path, size: size, mediaType: types.MediaType(mt),
			digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}}})
	}
	if got := hex.EncodeToString(whole.Sum(nil)); got != fl.digest.Hex {
		return nil, fmt.Errorf("%s: %w: read sha256:%s, manifest.json says sha256:%s", fl.path, ErrDigestMismatch, got, fl.digest.Hex)
	}
	return segs, nil
}

// cpioEnd walks the newc cpio archive at off and returns where the next
// archive starts: after its TRAILER!!! entry and the zero bytes that pad
// it.
func cpioEnd(r io.ReaderAt, off, size int64) (int64, error) {
	const headerLen = 110
	for {
		var h [headerLen]byte
		if _, err := r.ReadAt(h[:], off); err != nil {
			return 0, fmt.Errorf("cpio header at %d: %w", off, err)
		}
		if m := string(h[:6]); m != "070701" && m != "070702" {
			return 0, fmt.Errorf("cpio header at %d: magic %q", off, m)
		}
		fileSize, err1 := strconv.ParseUint(string(h[54:62]), 16, 32)
		nameSize, err2 := strconv.ParseUint(string(h[94:102]), 16, 32)
		if err1 != nil || err2 != nil || nameSize == 0 || nameSize > 4096 {
			return 0, fmt.Errorf("cpio header at %d: bad sizes", off)
		}
		name := make([]byte, nameSize-1)
		if _, err := r.ReadAt(name, off+headerLen); err != nil {
			return 0, fmt.Errorf("cpio name at %d: %w", off, err)
		}
		next := align4(align4(off+headerLen+int64(nameSize)) + int64(fileSize))
		if next > size {
			return 0, fmt.Errorf("cpio entry %q at %d runs past the end (%d bytes)", name, off, size)
		}
		off = next
		if string(name) == "TRAILER!!!" {
			break
		}
	}
	// Zero padding up to the next archive.
	var buf [4096]byte
	for off < size {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n == 0 && err != nil {
			return 0, err
		}
		i := 0
		for i < n && buf[i] == 0 {
			i++
		}
		off += int64(i)
		if i < n {
			break
		}
	}
	return off, nil
}

func align4(n int64) int64 { return (n + 3) &^ 3 }

// qcow2Layer is disk.raw as a qcow2 image, written while it streams; its
// digest is computed when the layer is made (one conversion into sha256).
type qcow2Layer struct {
	path   string
	layout *qcow2.Layout
	digest v1.Hash
}

func newQcow2Layer(dir string, a Artifact) (*qcow2Layer, error) {
	fl, err := newFileLayer(dir, a)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(fl.path)
	if err != nil {
		return nil, fmt.Errorf("disk: %w", err)
	}
	defer f.Close()
	layout, err := qcow2.Scan(f, a.Size)
	if err != nil {
		return nil, fmt.Errorf("disk %s: %w", a.Path, err)
	}
	if got := layout.RawSHA256(); got != fl.digest.Hex {
		return nil, fmt.Errorf("%s: %w: read sha256:%s, manifest.json says sha256:%s", fl.path, ErrDigestMismatch, got, fl.digest.Hex)
	}
	h := sha256.New()
	if _, err := layout.WriteTo(f, h); err != nil {
		return nil, fmt.Errorf("disk %s: %w", a.Path, err)
	}
	return &qcow2Layer{path: fl.path, layout: layout, digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}}, nil
}

func (l *qcow2Layer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *qcow2Layer) DiffID() (v1.Hash, error) { return l.digest, nil }
func (l *qcow2Layer) Size() (int64, error)     { return l.layout.Size(), nil }
func (l *qcow2Layer) MediaType() (types.MediaType, error) {
	return V2MediaTypeDiskQcow2, nil
}
func (l *qcow2Layer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }

// Compressed converts the disk again as it is read; the bytes are checked
// against the digest computed when the layer was made.
func (l *qcow2Layer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("open disk: %w", err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := l.layout.WriteTo(f, pw)
		f.Close()
		pw.CloseWithError(err)
	}()
	return ocistore.NewVerifyingReader(pr, l.path+" as qcow2", l.digest, l.layout.Size()), nil
}
