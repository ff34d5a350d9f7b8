package ocistore

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Layout is a read-only view of an OCI image layout directory. Every blob
// it reads is checked against the descriptor that led to it: index.json's
// entries vouch for the manifests and indexes they name, a manifest for its
// config and layers. Manifests, indexes and configs are bounded by
// MaxManifestSize before they are read; layer readers fail at their end
// (see NewVerifyingReader) and so must be read to EOF to be trusted.
type Layout struct {
	dir string
}

// OpenLayout opens the layout at dir (it must hold an index.json).
func OpenLayout(dir string) (*Layout, error) {
	fi, err := os.Stat(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout: %w", dir, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not an OCI image layout: index.json is not a regular file", dir)
	}
	return &Layout{dir: dir}, nil
}

// Dir is the layout's directory.
func (l *Layout) Dir() string { return l.dir }

// Index returns the layout's index.json as an image index. index.json has
// no descriptor of its own (it is the root of trust for the layout); it is
// only bounded in size.
func (l *Layout) Index() (v1.ImageIndex, error) {
	p := filepath.Join(l.dir, "index.json")
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, MaxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(raw) > MaxManifestSize {
		return nil, fmt.Errorf("%s: over the %d-byte limit", p, MaxManifestSize)
	}
	sum := sha256.Sum256(raw)
	desc := v1.Descriptor{
		MediaType: types.OCIImageIndex,
		Size:      int64(len(raw)),
		Digest:    v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])},
	}
	return newIndex(l, desc, raw, p)
}

// blobPath is where a blob lives; d must have passed newHasher.
func (l *Layout) blobPath(d v1.Hash) string {
	return filepath.Join(l.dir, "blobs", d.Algorithm, d.Hex)
}

// openRaw opens a blob file without verifying its bytes: a well-formed
// digest names it, and it must be a regular file, not a link.
func (l *Layout) openRaw(d v1.Hash) (*os.File, error) {
	if _, err := newHasher(d); err != nil {
		return nil, err
	}
	p := l.blobPath(d)
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("blob %s: %s is not a regular file", d, p)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d, err)
	}
	if st, err := f.Stat(); err != nil || !os.SameFile(fi, st) {
		f.Close()
		return nil, fmt.Errorf("blob %s: %s changed while being opened", d, p)
	}
	return f, nil
}

// Open returns a reader of the blob d names that fails at its end unless
// the bytes match d's size and digest.
func (l *Layout) Open(d v1.Descriptor) (io.ReadCloser, error) {
	f, err := l.openRaw(d.Digest)
	if err != nil {
		return nil, err
	}
	return NewVerifyingReader(f, l.blobName(d.Digest), d.Digest, d.Size), nil
}

// ReadSmall reads a manifest, index or config blob, bounded and verified.
func (l *Layout) ReadSmall(d v1.Descriptor) ([]byte, error) {
	f, err := l.openRaw(d.Digest)
	if err != nil {
		return nil, err
	}
	return readVerified(f, l.blobName(d.Digest), d, MaxManifestSize)
}

func (l *Layout) blobName(d v1.Hash) string {
	return fmt.Sprintf("%s: blob %s", l.dir, d)
}

// index is an image index read from a layout: index.json itself or an
// index blob, already verified against its descriptor.
type index struct {
	l    *Layout
	desc v1.Descriptor
	raw  []byte
	name string
	im   *v1.IndexManifest
}

var _ v1.ImageIndex = (*index)(nil)

func newIndex(l *Layout, desc v1.Descriptor, raw []byte, name string) (*index, error) {
	im, err := v1.ParseIndexManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: parse index: %w", name, err)
	}
	return &index{l: l, desc: desc, raw: raw, name: name, im: im}, nil
}

func (i *index) MediaType() (types.MediaType, error) { return i.desc.MediaType, nil }
func (i *index) Digest() (v1.Hash, error)            { return i.desc.Digest, nil }
func (i *index) Size() (int64, error)                { return i.desc.Size, nil }
func (i *index) RawManifest() ([]byte, error)        { return i.raw, nil }

// IndexManifest returns a copy, so callers cannot change what later
// lookups see.
func (i *index) IndexManifest() (*v1.IndexManifest, error) {
	return v1.ParseIndexManifest(bytes.NewReader(i.raw))
}

func (i *index) find(h v1.Hash) (v1.Descriptor, error) {
	for _, d := range i.im.Manifests {
		if d.Digest == h {
			return d, nil
		}
	}
	return v1.Descriptor{}, fmt.Errorf("%s: no manifest %s in the index", i.name, h)
}

func (i *index) Image(h v1.Hash) (v1.Image, error) {
	d, err := i.find(h)
	if err != nil {
		return nil, err
	}
	if !d.MediaType.IsImage() {
		return nil, fmt.Errorf("%s: %s is a %s, not an image manifest", i.name, h, d.MediaType)
	}
	return i.l.image(d)
}

func (i *index) ImageIndex(h v1.Hash) (v1.ImageIndex, error) {
	d, err := i.find(h)
	if err != nil {
		return nil, err
	}
	if !d.MediaType.IsIndex() {
		return nil, fmt.Errorf("%s: %s is a %s, not an index", i.name, h, d.MediaType)
	}
	return i.l.index(d)
}

func (l *Layout) index(d v1.Descriptor) (*index, error) {
	raw, err := l.ReadSmall(d)
	if err != nil {
		return nil, err
	}
	return newIndex(l, d, raw, l.blobName(d.Digest))
}

// image reads the manifest d names (verified) and returns the image; its
// config and layers are verified as they are read.
func (l *Layout) image(d v1.Descriptor) (v1.Image, error) {
	raw, err := l.ReadSmall(d)
	if err != nil {
		return nil, err
	}
	mf, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: parse manifest: %w", l.blobName(d.Digest), err)
	}
	return partial.CompressedToImage(&imageCore{l: l, desc: d, raw: raw, mf: mf})
}

// imageCore is the partial.CompressedImageCore go-containerregistry builds
// a v1.Image from; every blob it hands out is verified.
type imageCore struct {
	l    *Layout
	desc v1.Descriptor
	raw  []byte
	mf   *v1.Manifest

	mu     sync.Mutex
	config []byte
}

func (c *imageCore) MediaType() (types.MediaType, error) { return c.desc.MediaType, nil }
func (c *imageCore) RawManifest() ([]byte, error)        { return c.raw, nil }

func (c *imageCore) RawConfigFile() ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.config == nil {
		b, err := c.l.ReadSmall(c.mf.Config)
		if err != nil {
			return nil, fmt.Errorf("config of %s: %w", c.desc.Digest, err)
		}
		c.config = b
	}
	return c.config, nil
}

func (c *imageCore) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h == c.mf.Config.Digest {
		return &blob{l: c.l, desc: c.mf.Config}, nil
	}
	for _, d := range c.mf.Layers {
		if d.Digest == h {
			return &blob{l: c.l, desc: d}, nil
		}
	}
	return nil, fmt.Errorf("image %s has no layer %s", c.desc.Digest, h)
}

// blob is a layer (or the config) of a layout image.
type blob struct {
	l    *Layout
	desc v1.Descriptor
}

func (b *blob) Digest() (v1.Hash, error)            { return b.desc.Digest, nil }
func (b *blob) Size() (int64, error)                { return b.desc.Size, nil }
func (b *blob) MediaType() (types.MediaType, error) { return b.desc.MediaType, nil }
func (b *blob) Compressed() (io.ReadCloser, error)  { return b.l.Open(b.desc) }

// Descriptor keeps the manifest's annotations on the layer.
func (b *blob) Descriptor() (*v1.Descriptor, error) { d := b.desc; return &d, nil }
