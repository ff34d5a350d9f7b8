package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/publish"
)

// archRef is ref with its tag suffixed -ARCH, the way IronCore's os-images
// tags one architecture (VERSION-amd64); "" for a reference by digest.
func archRef(ref, arch string, opts publish.Options) (string, error) {
	t, err := publish.ParseTarget(ref, opts)
	if err != nil {
		return "", err
	}
	if t.Remote == nil {
		if t.LayoutTag == "" {
			return "", nil
		}
		t.LayoutTag += "-" + arch
		return t.String(), nil
	}
	tag, ok := t.Remote.(name.Tag)
	if !ok {
		return "", nil
	}
	return tag.Context().Tag(tag.TagStr() + "-" + arch).String(), nil
}

// pushArchitectures pushes the outputs as one index under ref and, when
// there are several, each alone under its architecture's tag (ref's tag
// -ARCH). It returns the index's digest and the per-architecture refs.
func pushArchitectures(ctx context.Context, dirs []string, ref string, opts publish.Options) (v1.Hash, []string, error) {
	h, err := publish.PushDirs(ctx, dirs, ref, opts)
	if err != nil || len(dirs) < 2 {
		return h, nil, err
	}
	one := opts
	one.Tags = nil
	var refs []string
	for _, d := range dirs {
		m, err := osimage.ReadManifest(d)
		if err != nil {
			return h, refs, err
		}
		r, err := archRef(ref, m.Architecture, opts)
		if err != nil || r == "" {
			return h, refs, errors.Join(err, fmt.Errorf("%s: no tag to suffix with -%s", ref, m.Architecture))
		}
		if _, err := publish.Push(ctx, d, r, one); err != nil {
			return h, refs, fmt.Errorf("%s: %w", r, err)
		}
		refs = append(refs, r)
	}
	return h, refs, nil
}
