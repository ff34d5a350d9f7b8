package publish

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/osimage"
)

// Push publishes the output directory dir as an image index under ref and
// returns the index digest. ref is a registry reference or oci:PATH[:TAG];
// empty means oci:out/oci tagged with the build's version.
func Push(ctx context.Context, dir, ref string, opts Options) (v1.Hash, error) {
	return PushDirs(ctx, []string{dir}, ref, opts)
}

// PushDirs publishes several output directories (one per architecture, or
// one of several architectures: OutputDirs) as
// one index: per architecture the v1 manifest first (what boot-operator
// and ironcore-image v0.5.0 resolve), then the IronCore Image V2 kinds
// unless opts.NoV2 or the build's recipe turned them off.
func PushDirs(ctx context.Context, dirs []string, ref string, opts Options) (v1.Hash, error) {
	if len(dirs) == 0 {
		return v1.Hash{}, errors.New("no output directory to push")
	}
	dirs, err := expandOutputs(dirs)
	if err != nil {
		return v1.Hash{}, err
	}
	idx, err := osimage.NewIndexOf(osimage.IndexOptions{NoV2: opts.NoV2}, dirs...)
	if err != nil {
		return v1.Hash{}, err
	}
	if ref == "" {
		m, err := osimage.ReadManifest(dirs[0])
		if err != nil {
			return v1.Hash{}, err
		}
		ref = LayoutPrefix + DefaultLayout + ":" + m.Version
	}
	t, err := ParseTarget(ref, opts)
	if err != nil {
		return v1.Hash{}, err
	}
	if t.Remote == nil {
		tags := append([]string{t.LayoutTag}, opts.Tags...)
		return writeLayout(idx, t.LayoutPath, tags)
	}
	return pushRemote(ctx, idx, dirs, t.Remote, opts)
}

// pushRemote writes the index and its tags, then attaches the SBOM and the
// provenance (made and, with a key, signed first) to the index digest as OCI referrers (docs/image-format.md,
// "Attestations").
func pushRemote(ctx context.Context, idx v1.ImageIndex, dirs []string, ref name.Reference, opts Options) (v1.Hash, error) {
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	// Made (and signed) before anything is pushed: an output the key must
	// not vouch for pushes nothing.
	subject, err := partial.Descriptor(idx)
	if err != nil {
		return v1.Hash{}, err
	}
	atts, err := Attestations(dirs, ref.Context().Name(), digest.String(), opts.Provenance)
	if err != nil {
		return v1.Hash{}, err
	}
	if opts.Signer != nil {
		if atts, err = signAttestations(atts, dirs, opts); err != nil {
			return v1.Hash{}, err
		}
	}
	ropts := opts.remoteOptions(ctx)
	if err := writeSharedBlobs(ctx, func() error { return remote.WriteIndex(ref, idx, ropts...) }); err != nil {
		return v1.Hash{}, fmt.Errorf("push %s: %w", ref, err)
	}
	for _, tag := range opts.Tags {
		t, err := name.NewTag(ref.Context().String()+":"+tag, opts.nameOptions()...)
		if err != nil {
			return digest, fmt.Errorf("tag %q: %w", tag, err)
		}
		if err := remote.Tag(t, idx, ropts...); err != nil {
			return digest, fmt.Errorf("tag %s: %w", t, err)
		}
	}
	if _, err := pushReferrers(ctx, ref.Context(), *subject, atts, opts); err != nil {
		return digest, err
	}
	return digest, nil
}

// PushLayout writes the output directory dir into the OCI layout at
// layoutPath (created if missing) and tags it; an existing entry with the
// same tag is replaced. An empty tag means the build's version.
func PushLayout(dir, layoutPath, tag string) (v1.Hash, error) {
	idx, err := osimage.NewIndexFromDirs(dir)
	if err != nil {
		return v1.Hash{}, err
	}
	return writeLayout(idx, layoutPath, []string{tag})
}

func writeLayout(idx v1.ImageIndex, layoutPath string, tags []string) (v1.Hash, error) {
	digest, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if tags[0] == "" {
		version, err := indexVersion(idx)
		if err != nil {
			return v1.Hash{}, err
		}
		tags[0] = version
	}
	p, err := layout.FromPath(layoutPath)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return v1.Hash{}, fmt.Errorf("open OCI layout %s: %w", layoutPath, err)
		}
		if p, err = layout.Write(layoutPath, empty.Index); err != nil {
			return v1.Hash{}, fmt.Errorf("create OCI layout %s: %w", layoutPath, err)
		}
	}
	for _, tag := range tags {
		err := p.ReplaceIndex(idx, match.Annotation(annotationRefName, tag),
			layout.WithAnnotations(map[string]string{annotationRefName: tag}))
		if err != nil {
			return v1.Hash{}, fmt.Errorf("write %s:%s: %w", layoutPath, tag, err)
		}
	}
	return digest, nil
}

// indexVersion is the recipe version of the index's first image.
func indexVersion(idx v1.ImageIndex) (string, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	for _, d := range im.Manifests {
		img, err := idx.Image(d.Digest)
		if err != nil {
			return "", err
		}
		mf, err := img.Manifest()
		if err != nil {
			return "", err
		}
		if v := mf.Annotations[osimage.AnnotationRecipeVersion]; v != "" {
			return v, nil
		}
	}
	return "", errors.New("no tag given and the image has no version")
}
