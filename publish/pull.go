package publish

import (
	"github.com/ironcore-dev/os-builder/internal/atomicfile"

	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/ocistore"
	"github.com/ironcore-dev/os-builder/osimage"
)

// resolved is what a reference points at: an index with per-platform
// images, or a lone image manifest.
type resolved struct {
	ref       string
	remote    name.Reference // nil for layouts
	digest    v1.Hash
	mediaType types.MediaType
	images    []platformImage
}

type platformImage struct {
	desc v1.Descriptor
	img  v1.Image
}

func (p platformImage) arch() string {
	if p.desc.Platform != nil {
		return p.desc.Platform.Architecture
	}
	if mf, err := p.img.Manifest(); err == nil {
		return mf.Annotations[osimage.AnnotationArchitecture]
	}
	return ""
}

// Open resolves ref (registry reference or oci:PATH[:TAG]) to its index.
// A reference to a lone image manifest is returned wrapped in no index; use
// Inspect or Pull for those.
func Open(ctx context.Context, ref string, opts Options) (v1.ImageIndex, error) {
	t, err := ParseTarget(ref, opts)
	if err != nil {
		return nil, err
	}
	if t.Remote != nil {
		idx, err := remote.Index(t.Remote, opts.remoteOptions(ctx)...)
		if err != nil {
			return nil, fmt.Errorf("fetch index %s: %w", t.Remote, err)
		}
		return idx, nil
	}
	desc, root, err := layoutEntry(t)
	if err != nil {
		return nil, err
	}
	if !desc.MediaType.IsIndex() {
		return nil, fmt.Errorf("%s is an image manifest, not an index", t)
	}
	return root.ImageIndex(desc.Digest)
}

// layoutEntry finds the index.json entry a layout target names: the one
// tagged LayoutTag, or the only entry when no tag is given. The layout is
// read through ocistore, so every manifest, config and layer read from it
// is checked against its descriptor.
func layoutEntry(t Target) (v1.Descriptor, v1.ImageIndex, error) {
	l, err := ocistore.OpenLayout(t.LayoutPath)
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("open OCI layout: %w", err)
	}
	root, err := l.Index()
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("open OCI layout: %w", err)
	}
	im, err := root.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, nil, fmt.Errorf("read %s/index.json: %w", t.LayoutPath, err)
	}
	var tags []string
	for _, d := range im.Manifests {
		tag := d.Annotations[annotationRefName]
		if t.LayoutTag == "" && len(im.Manifests) == 1 || tag != "" && tag == t.LayoutTag {
			return d, root, nil
		}
		tags = append(tags, tag)
	}
	if t.LayoutTag == "" {
		return v1.Descriptor{}, nil, fmt.Errorf("%s holds %d entries (tags %s): name one as oci:PATH:TAG", t.LayoutPath, len(im.Manifests), strings.Join(tags, ", "))
	}
	return v1.Descriptor{}, nil, fmt.Errorf("%s has no tag %q (tags: %s)", t.LayoutPath, t.LayoutTag, strings.Join(tags, ", "))
}

func resolve(ctx context.Context, ref string, opts Options) (*resolved, error) {
	t, err := ParseTarget(ref, opts)
	if err != nil {
		return nil, err
	}
	r := &resolved{ref: t.String(), remote: t.Remote}
	var (
		idx  v1.ImageIndex
		img  v1.Image
		size int64
	)
	if t.Remote != nil {
		desc, err := remote.Get(t.Remote, opts.remoteOptions(ctx)...)
		if err != nil {
			return nil, fmt.Errorf("fetch %s: %w", t.Remote, err)
		}
		r.digest, r.mediaType, size = desc.Digest, desc.MediaType, desc.Size
		if desc.MediaType.IsIndex() {
			idx, err = desc.ImageIndex()
		} else {
			img, err = desc.Image()
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", t.Remote, err)
		}
	} else {
		desc, root, err := layoutEntry(t)
		if err != nil {
			return nil, err
		}
		r.digest, r.mediaType, size = desc.Digest, desc.MediaType, desc.Size
		if desc.MediaType.IsIndex() {
			idx, err = root.ImageIndex(desc.Digest)
		} else {
			img, err = root.Image(desc.Digest)
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", t, err)
		}
	}
	// Manifests are checked here whatever the source: the layout reader
	// and go-containerregistry's remote check too, but this is what
	// Inspect and Pull rest on.
	if img != nil {
		if err := osimage.VerifyManifest(img, v1.Descriptor{Digest: r.digest, Size: size}); err != nil {
			return nil, fmt.Errorf("%s: %w", r.ref, err)
		}
		mf, err := img.Manifest()
		if err != nil {
			return nil, fmt.Errorf("read manifest of %s: %w", r.ref, err)
		}
		r.images = []platformImage{{desc: v1.Descriptor{MediaType: r.mediaType, Digest: r.digest, ArtifactType: mf.ArtifactType}, img: img}}
		return r, nil
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read index of %s: %w", r.ref, err)
	}
	for _, d := range im.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("read manifest %s of %s: %w", d.Digest, r.ref, err)
		}
		if err := osimage.VerifyManifest(img, d); err != nil {
			return nil, fmt.Errorf("%s: %w", r.ref, err)
		}
		r.images = append(r.images, platformImage{desc: d, img: img})
	}
	if len(r.images) == 0 {
		return nil, fmt.Errorf("%s holds no image manifests", r.ref)
	}
	return r, nil
}

// kind is the manifest's kind: KindV1, or its IronCore Image V2 kind.
func (p platformImage) kind() string {
	mf, err := p.img.Manifest()
	if err != nil {
		return KindV1
	}
	if k, isV2, _ := osimage.V2KindOf(mf); isV2 {
		return string(k)
	}
	return KindV1
}

// pick chooses the manifests of arch (empty: the only architecture) of
// kind (empty: the v1 manifest where there is one, else every V2 kind).
func (r *resolved) pick(arch, kind string) ([]platformImage, error) {
	var archs []string
	for _, p := range r.images {
		if !slices.Contains(archs, p.arch()) {
			archs = append(archs, p.arch())
		}
	}
	sort.Strings(archs)
	if arch == "" {
		if len(archs) != 1 {
			return nil, fmt.Errorf("%s has several architectures (%s): choose one", r.ref, strings.Join(archs, ", "))
		}
		arch = archs[0]
	}
	var ofArch []platformImage
	var kinds []string
	for _, p := range r.images {
		if p.arch() == arch {
			ofArch = append(ofArch, p)
			kinds = append(kinds, p.kind())
		}
	}
	if len(ofArch) == 0 {
		return nil, fmt.Errorf("%s has no %s image (it has %s)", r.ref, arch, strings.Join(archs, ", "))
	}
	want := kind
	if want == "" {
		want = KindV1
		if !slices.Contains(kinds, KindV1) {
			return ofArch, nil // V2 only: every kind
		}
	}
	for _, p := range ofArch {
		if p.kind() == want {
			return []platformImage{p}, nil
		}
	}
	return nil, fmt.Errorf("%s has no %s manifest for %s (it has %s)", r.ref, want, arch, strings.Join(kinds, ", "))
}

// Pull fetches the artifacts of ref (the image for opts.Arch) into destDir,
// named by their title annotations, and verifies each against its layer
// digest while streaming, then against manifest.json's records. It returns
// the pulled build manifest (nil if the image carries none).
func Pull(ctx context.Context, ref, destDir string, opts Options) (*osimage.BuildManifest, error) {
	r, err := resolve(ctx, ref, opts)
	if err != nil {
		return nil, err
	}
	picked, err := r.pick(opts.Arch, opts.Kind)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(destDir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", destDir, err)
	}
	pulled := map[string]v1.Descriptor{}
	for _, p := range picked {
		if err := pullImage(ctx, r.ref, p, destDir, pulled); err != nil {
			return nil, err
		}
	}
	if _, ok := pulled[osimage.ManifestFile]; !ok {
		return nil, nil
	}
	bm, err := osimage.ReadManifest(destDir)
	if err != nil {
		return nil, err
	}
	for _, a := range bm.Artifacts {
		d, ok := pulled[filepath.Base(a.Path)]
		if !ok {
			return nil, fmt.Errorf("manifest.json lists %s, the image has no layer for it", a.Path)
		}
		if d.Digest.Hex != a.SHA256 || d.Size != a.Size {
			return nil, fmt.Errorf("%s: %w: manifest.json says sha256:%s (%d bytes), layer is %s (%d bytes)",
				a.Path, osimage.ErrDigestMismatch, a.SHA256, a.Size, d.Digest, d.Size)
		}
	}
	return bm, nil
}

// pullImage writes the titled layers of one manifest into destDir; pulled
// collects what every manifest pulled wrote, so no two write one file.
func pullImage(ctx context.Context, ref string, p platformImage, destDir string, pulled map[string]v1.Descriptor) error {
	mf, err := p.img.Manifest()
	if err != nil {
		return fmt.Errorf("read manifest of %s: %w", ref, err)
	}
	if _, _, err := osimage.V2KindOf(mf); err != nil {
		return fmt.Errorf("%s: manifest %s: %w", ref, p.desc.Digest, err)
	}
	for _, d := range mf.Layers {
		title := d.Annotations[osimage.AnnotationTitle]
		if title == "" {
			continue
		}
		if filepath.Base(title) != title || !filepath.IsLocal(title) {
			return fmt.Errorf("layer %s: title %q is not a plain file name", d.Digest, title)
		}
		if _, dup := pulled[title]; dup {
			return fmt.Errorf("two layers titled %q", title)
		}
		if err := pullLayer(ctx, p.img, d, filepath.Join(destDir, title)); err != nil {
			return err
		}
		pulled[title] = d
	}
	return nil
}

func pullLayer(ctx context.Context, img v1.Image, d v1.Descriptor, dest string) error {
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("fetch %s: %w", filepath.Base(dest), err)
	}
	vr := ocistore.NewVerifyingReader(rc, filepath.Base(dest), d.Digest, d.Size)
	defer vr.Close()
	err = atomicfile.Write(dest, 0o644, func(f *os.File) error {
		_, err := io.Copy(f, ctxReader{ctx, vr})
		return err
	})
	if err != nil {
		return fmt.Errorf("pull %s: %w", filepath.Base(dest), err)
	}
	return nil
}

// ctxReader stops a long copy when the context is cancelled.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
