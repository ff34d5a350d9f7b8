package sources

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/recipe"
)

// unreachableError names the source and every way around it.
func unreachableError(image, layer, via string, err error) error {
	reg := "REGISTRY"
	if ref, err := name.ParseReference(image); err == nil {
		reg = ref.Context().RegistryStr()
	}
	what := "oci source " + image
	if layer != "" {
		what = "layer " + layer + ": " + what
	}
	if via != "" {
		what += " (via mirror " + via + ")"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s cannot be fetched: %v\n", what, err)
	b.WriteString("ways around it:\n")
	fmt.Fprintf(&b, "  - a registry mirror that has it: %s=%s=MIRROR-HOST[/PREFIX] (comma-separated, http:// for plain HTTP)\n", MirrorsEnv, reg)
	if strings.Contains(image, "@") {
		fmt.Fprintf(&b, "  - import a pre-fetched copy into the local store: builder cache import %s OCI-LAYOUT-DIR|OCI-ARCHIVE.tar\n", image)
	} else {
		// A tag resolves only at a registry: the store is keyed by digest.
		fmt.Fprintf(&b, "  - import a pre-fetched copy (builder cache import %s@sha256:DIGEST OCI-LAYOUT-DIR|OCI-ARCHIVE.tar) and pin that digest in the layer (%s@sha256:DIGEST)\n", image, image)
	}
	if layer != "" {
		fmt.Fprintf(&b, "  - leave the layer out: --exclude-layer %s (build: recorded in the manifest's excludedLayers; lock: nothing recorded for it)", layer)
	} else {
		b.WriteString("  - leave its layer out: --exclude-layer LAYER (build: recorded in the manifest's excludedLayers; lock: nothing recorded for it)")
	}
	return &SourceUnreachableError{Image: image, Layer: layer, msg: b.String(), err: err}
}

// SourceUnreachableError is an OCI source that is neither in the local
// store nor fetchable from its registry or mirror.
type SourceUnreachableError struct {
	Image, Layer string
	msg          string
	err          error
}

func (e *SourceUnreachableError) Error() string { return e.msg }
func (e *SourceUnreachableError) Unwrap() error { return e.err }

// PreflightOCI checks, before any long step runs, that every OCI source of
// the recipe's layers (excluded layers are already gone from r.Resolved)
// can be had: from the local store under cacheDir ("" for the default), or
// by a manifest HEAD against its registry or mirror within seconds. All
// sources are checked in parallel; every failure is reported.
func PreflightOCI(ctx context.Context, r *recipe.Recipe, cacheDir string) error {
	if cacheDir == "" {
		cacheDir = cache.DefaultDir()
	}
	mirrors, err := RegistryMirrorsFromEnv()
	if err != nil {
		return err
	}
	st, stErr := OpenOCIStore(OCIStoreDir(cacheDir))
	type job struct{ layer, image string }
	var jobs []job
	for _, l := range r.Resolved {
		for _, o := range l.OCI {
			jobs = append(jobs, job{l.Name, o.Image})
		}
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = preflightOne(ctx, st, stErr, mirrors, j.layer, j.image, r.Base.Architecture)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func preflightOne(ctx context.Context, st *OCIStore, stErr error, mirrors RegistryMirrors, layer, image, arch string) error {
	// A build pins every source first (see pinSources); a tag here is
	// checked for reachability all the same.
	ref, err := name.ParseReference(image)
	if err != nil {
		return fmt.Errorf("layer %s: oci image %q: %w", layer, image, err)
	}
	digest, pinned := ref.(name.Digest)
	if pinned && stErr == nil {
		if _, err := st.Image(digest, v1.Platform{OS: "linux", Architecture: arch}); err == nil {
			return nil
		} else if !errors.Is(err, ErrNotInStore) {
			return fmt.Errorf("layer %s: %w", layer, err)
		}
	}
	pull, via, err := mirrors.RewriteRef(ref)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ociPreflightTimeout)
	defer cancel()
	ropts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(ociTransport()),
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 1, Steps: 1}),
	}
	desc, err := remote.Head(pull, ropts...)
	if err != nil {
		return unreachableError(image, layer, via, err)
	}
	if pinned && desc.Digest.String() != digest.DigestStr() {
		return unreachableError(image, layer, via, fmt.Errorf("registry serves digest %s for it", desc.Digest))
	}
	return checkPlatform(pull, desc.MediaType, layer, image, arch, ropts)
}

// checkPlatform fails when the image has no linux/arch build: an index
// without that platform, or one image of another architecture. Only the
// index or the image's config is read (kilobytes).
func checkPlatform(ref name.Reference, mt types.MediaType, layer, image, arch string, ropts []remote.Option) error {
	var have []string
	if mt.IsIndex() {
		idx, err := remote.Index(ref, ropts...)
		if err != nil {
			return fmt.Errorf("layer %s: oci image %s: %w", layer, image, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return fmt.Errorf("layer %s: oci image %s: %w", layer, image, err)
		}
		for _, m := range im.Manifests {
			if p := m.Platform; p != nil {
				if p.OS == "linux" && p.Architecture == arch {
					return nil
				}
				have = append(have, p.OS+"/"+p.Architecture)
			}
		}
	} else {
		img, err := remote.Image(ref, ropts...)
		if err != nil {
			return fmt.Errorf("layer %s: oci image %s: %w", layer, image, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return fmt.Errorf("layer %s: oci image %s: config: %w", layer, image, err)
		}
		if cf.OS == "linux" && cf.Architecture == arch {
			return nil
		}
		have = append(have, cf.OS+"/"+cf.Architecture)
	}
	return fmt.Errorf("layer %s: oci image %s has no linux/%s build (it has: %s)", layer, image, arch, strings.Join(have, ", "))
}
