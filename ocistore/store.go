package ocistore

import (
	"github.com/ironcore-dev/os-builder/internal/atomicfile"

	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ErrNotFound means the store holds no image for a digest.
var ErrNotFound = errors.New("not in the local OCI store")

// RefAnnotation records, on each stored manifest, the reference it was
// imported as (the OCI image layout's standard name annotation).
const RefAnnotation = "org.opencontainers.image.ref.name"

// maxDepth bounds nested indexes followed at import.
const maxDepth = 4

// Store is an OCI image layout holding images imported for offline builds,
// looked up by manifest digest. Every blob is verified when it is imported
// and again whenever it is read.
type Store struct {
	layout *Layout
	mu     sync.Mutex
}

// Open opens the store at dir, creating an empty layout if needed.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("oci store: %w", err)
	}
	if err := initLayout(dir); err != nil {
		return nil, fmt.Errorf("oci store: %w", err)
	}
	l, err := OpenLayout(dir)
	if err != nil {
		return nil, fmt.Errorf("oci store: %w", err)
	}
	return &Store{layout: l}, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.layout.dir }

// Image returns the stored image for ref's digest; when the digest names an
// index, the image for platform. The manifest is checked against the
// digest ref pins; config and layers against the manifest when read.
func (s *Store) Image(ref name.Digest, platform v1.Platform) (v1.Image, error) {
	h, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return nil, err
	}
	root, err := s.layout.Index()
	if err != nil {
		return nil, fmt.Errorf("oci store: %w", err)
	}
	im, err := root.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("oci store: %w", err)
	}
	for _, d := range im.Manifests {
		if d.Digest != h {
			continue
		}
		if d.MediaType.IsIndex() {
			child, err := root.ImageIndex(h)
			if err != nil {
				return nil, fmt.Errorf("oci store: %s: %w", ref, err)
			}
			return imageForPlatform(child, platform, ref.String())
		}
		img, err := root.Image(h)
		if err != nil {
			return nil, fmt.Errorf("oci store: %s: %w", ref, err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("%s: %w", ref, ErrNotFound)
}

func imageForPlatform(idx v1.ImageIndex, platform v1.Platform, what string) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.OS == platform.OS && d.Platform.Architecture == platform.Architecture {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("%s: no image for %s/%s in the index", what, platform.OS, platform.Architecture)
}

// source hands out the raw bytes of a blob; the store verifies them.
type source interface {
	open(d v1.Descriptor) (io.ReadCloser, error)
}

// Import copies the image or index that src holds for ref into the store,
// after checking that its digest is the one ref pins. Every blob
// (manifests, indexes, config, layers) is checked against its descriptor
// while it is copied; nothing is recorded in the store's index.json unless
// all were. src is an OCI image layout directory, a tar archive of one
// (oci-archive), or a tarball written by `docker save`/`crane pull`
// (accepted only if its manifest digest still matches, which a
// re-compressed save rarely does).
func (s *Store) Import(ref name.Digest, src string) (v1.Descriptor, error) {
	want, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return v1.Descriptor{}, err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return v1.Descriptor{}, err
	}
	dir := src
	if !fi.IsDir() {
		tmp, err := os.MkdirTemp("", "osb-oci-import-")
		if err != nil {
			return v1.Descriptor{}, err
		}
		defer os.RemoveAll(tmp)
		if err := Untar(src, tmp); err != nil {
			return v1.Descriptor{}, fmt.Errorf("%s: %w", src, err)
		}
		dir = tmp
		if _, err := os.Stat(filepath.Join(tmp, "index.json")); err != nil {
			return s.importDockerTarball(ref, want, src)
		}
	}
	l, err := OpenLayout(dir)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", src, err)
	}
	root, err := l.Index()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", src, err)
	}
	im, err := root.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", src, err)
	}
	var found []string
	for _, d := range im.Manifests {
		found = append(found, d.Digest.String())
		if d.Digest != want {
			continue
		}
		if err := s.copyTree(layoutSource{l}, d, 0); err != nil {
			return d, fmt.Errorf("%s: %w", src, err)
		}
		return d, s.record(ref, d)
	}
	return v1.Descriptor{}, fmt.Errorf("%s holds no manifest with digest %s (it has: %s): refusing to import a different image", src, want, strings.Join(found, ", "))
}

func (s *Store) importDockerTarball(ref name.Digest, want v1.Hash, src string) (v1.Descriptor, error) {
	img, err := tarball.ImageFromPath(src, nil)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: neither an OCI layout archive nor a docker tarball: %w", src, err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", src, err)
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", src, err)
	}
	got, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", src, err)
	}
	if got != want {
		return v1.Descriptor{}, fmt.Errorf("%s: image digest %s, want %s: a docker-save tarball does not keep the registry's manifest; export an OCI layout instead (crane pull --format=oci, skopeo copy ... oci:DIR)", src, got, want)
	}
	d := v1.Descriptor{MediaType: mt, Digest: want, Size: int64(len(raw))}
	if err := s.copyTree(imageSource{img: img, manifest: raw}, d, 0); err != nil {
		return d, fmt.Errorf("%s: %w", src, err)
	}
	return d, s.record(ref, d)
}

// copyTree copies the manifest or index d and everything it references,
// children first. An index entry that is neither (an artifact, say) is
// copied as a plain blob, as go-containerregistry's layout writer does.
func (s *Store) copyTree(src source, d v1.Descriptor, depth int) error {
	if !d.MediaType.IsIndex() && !d.MediaType.IsImage() {
		if depth == 0 {
			return fmt.Errorf("%s: media type %q is neither an image manifest nor an index", d.Digest, d.MediaType)
		}
		return s.copyBlob(src, d)
	}
	rc, err := src.open(d)
	if err != nil {
		return err
	}
	raw, err := readVerified(rc, "manifest "+d.Digest.String(), d, MaxManifestSize)
	if err != nil {
		return err
	}
	switch {
	case d.MediaType.IsIndex():
		if depth >= maxDepth {
			return fmt.Errorf("index %s: indexes nested deeper than %d", d.Digest, maxDepth)
		}
		im, err := v1.ParseIndexManifest(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("index %s: %w", d.Digest, err)
		}
		for _, c := range im.Manifests {
			if err := s.copyTree(src, c, depth+1); err != nil {
				return fmt.Errorf("index %s: %w", d.Digest, err)
			}
		}
	case d.MediaType.IsImage():
		mf, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			return fmt.Errorf("manifest %s: %w", d.Digest, err)
		}
		if mf.Config.Size > MaxManifestSize {
			return fmt.Errorf("manifest %s: config size %d is over the %d-byte limit", d.Digest, mf.Config.Size, MaxManifestSize)
		}
		for _, b := range append([]v1.Descriptor{mf.Config}, mf.Layers...) {
			if err := s.copyBlob(src, b); err != nil {
				return fmt.Errorf("manifest %s: %w", d.Digest, err)
			}
		}
	}
	return s.putBlob(d, io.NopCloser(bytes.NewReader(raw)))
}

func (s *Store) copyBlob(src source, d v1.Descriptor) error {
	rc, err := src.open(d)
	if err != nil {
		return err
	}
	return s.putBlob(d, rc)
}

// putBlob writes rc to blobs/ through a verifying reader, beside the
// target first, so a blob file in the store is always one that verified.
// An existing copy is replaced: a store blob damaged since is repaired.
func (s *Store) putBlob(d v1.Descriptor, rc io.ReadCloser) error {
	vr := NewVerifyingReader(rc, "blob "+d.Digest.String(), d.Digest, d.Size)
	defer vr.Close()
	if _, err := newHasher(d.Digest); err != nil {
		return err
	}
	dir := filepath.Join(s.layout.dir, "blobs", d.Digest.Algorithm)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, d.Digest.Hex), 0o444, func(f *os.File) error {
		_, err := io.Copy(f, vr)
		return err
	})
}

// lockStore takes the store's flock, which every writer of index.json
// holds: concurrent importers (other processes included) never lose an
// entry, and only one creates the empty layout. Close releases it.
func lockStore(dir string) (*os.File, error) {
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		return nil, fmt.Errorf("lock: %w", err)
	}
	return lock, nil
}

// initLayout creates an empty layout in dir unless it has one. Checked
// under the lock: an opener that saw no index.json must not overwrite the
// one another importer has written and filled since.
func initLayout(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err == nil {
		return nil
	}
	lock, err := lockStore(dir)
	if err != nil {
		return err
	}
	defer lock.Close()
	if _, err := os.Stat(filepath.Join(dir, "index.json")); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(dir, "index.json"), []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`), 0o644)
}

// record puts d into the store's index.json, replacing an entry with the
// same digest, under the store's lock.
func (s *Store) record(ref name.Digest, d v1.Descriptor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lock, err := lockStore(s.layout.dir)
	if err != nil {
		return fmt.Errorf("oci store: %w", err)
	}
	defer lock.Close()
	root, err := s.layout.Index()
	if err != nil {
		return fmt.Errorf("oci store: %w", err)
	}
	im, err := root.IndexManifest()
	if err != nil {
		return fmt.Errorf("oci store: %w", err)
	}
	kept := im.Manifests[:0]
	for _, m := range im.Manifests {
		if m.Digest != d.Digest {
			kept = append(kept, m)
		}
	}
	entry := v1.Descriptor{MediaType: d.MediaType, Size: d.Size, Digest: d.Digest, Platform: d.Platform,
		Annotations: map[string]string{RefAnnotation: ref.String()}}
	im.Manifests = append(kept, entry)
	if im.SchemaVersion == 0 {
		im.SchemaVersion = 2
	}
	if im.MediaType == "" {
		im.MediaType = types.OCIImageIndex
	}
	b, err := json.Marshal(im)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(s.layout.dir, "index.json"), b, 0o644); err != nil {
		return fmt.Errorf("oci store: %w", err)
	}
	return nil
}

// layoutSource reads blobs of an OCI layout directory.
type layoutSource struct{ l *Layout }

func (s layoutSource) open(d v1.Descriptor) (io.ReadCloser, error) { return s.l.openRaw(d.Digest) }

// imageSource reads the blobs of one v1.Image (a docker tarball).
type imageSource struct {
	img      v1.Image
	manifest []byte
}

func (s imageSource) open(d v1.Descriptor) (io.ReadCloser, error) {
	if h, err := s.img.Digest(); err == nil && h == d.Digest {
		return io.NopCloser(bytes.NewReader(s.manifest)), nil
	}
	if h, err := s.img.ConfigName(); err == nil && h == d.Digest {
		b, err := s.img.RawConfigFile()
		if err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	l, err := s.img.LayerByDigest(d.Digest)
	if err != nil {
		return nil, err
	}
	return l.Compressed()
}
