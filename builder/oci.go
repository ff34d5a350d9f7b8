package builder

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/recipe"
)

const ociVersion = "1"

// OCI network timeouts. A registry that cannot be reached must fail the
// build in seconds, not after the TCP stack's minutes of retries.
var (
	ociDialTimeout   = 5 * time.Second
	ociHeaderTimeout = 20 * time.Second
	// ociPreflightTimeout bounds the whole reachability check of one source.
	ociPreflightTimeout = 6 * time.Second
)

// ociStep copies chosen paths out of an OCI image's flattened filesystem.
// The reference carries a digest, so the digest alone keys the cache entry
// and go-containerregistry verifies every blob it pulls against it. The
// image comes from the local OCI store when it was imported there
// (`builder cache import`), otherwise from its registry or that registry's
// mirror (OSB_REGISTRY_MIRRORS).
type ociStep struct {
	src  recipe.OCISource
	arch string
	// storeDir is the local OCI store; empty means OCIStoreDir(DefaultCacheDir()).
	storeDir string
}

func (s *ociStep) Name() string { return "oci:" + s.src.Image }

func (s *ociStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", ociVersion)
	in.Add("image", s.src.Image)
	in.Add("arch", s.arch)
	var pairs []string
	for from, to := range s.src.Paths {
		pairs = append(pairs, from+"="+to)
	}
	sort.Strings(pairs)
	in.Add("paths", strings.Join(pairs, "\n"))
	return in, nil
}

// fileName maps an image path to its file name in the step's output.
func fileName(imagePath string) string {
	return strings.ReplaceAll(strings.TrimPrefix(path.Clean("/"+imagePath), "/"), "/", "%")
}

func (s *ociStep) binaries(out string) ([]binary, error) {
	var bins []binary
	for from, to := range s.src.Paths {
		bins = append(bins, binary{src: filepath.Join(out, fileName(from)), dest: to, step: s.Name()})
	}
	sort.Slice(bins, func(i, j int) bool { return bins[i].dest < bins[j].dest })
	return bins, nil
}

func (s *ociStep) Run(ctx context.Context, out string) error {
	img, err := s.image(ctx)
	if err != nil {
		return err
	}
	return extractPaths(img, s.src.Paths, out)
}

func (s *ociStep) store() string {
	if s.storeDir != "" {
		return s.storeDir
	}
	return OCIStoreDir(DefaultCacheDir())
}

// image finds the source image: the local store first, then the registry.
func (s *ociStep) image(ctx context.Context) (v1.Image, error) {
	ref, err := name.NewDigest(s.src.Image)
	if err != nil {
		return nil, fmt.Errorf("image %q: must be pinned by digest: %w", s.src.Image, err)
	}
	platform := v1.Platform{OS: "linux", Architecture: s.arch}
	if st, err := OpenOCIStore(s.store()); err == nil {
		img, err := st.Image(ref, platform)
		if err == nil {
			return img, nil
		}
		if !errors.Is(err, ErrNotInStore) {
			return nil, err
		}
	}
	mirrors, err := RegistryMirrorsFromEnv()
	if err != nil {
		return nil, err
	}
	pull, via, err := mirrors.Rewrite(ref)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(pull, remoteOptions(ctx, platform)...)
	if err != nil {
		return nil, unreachableError(s.src.Image, "", via, err)
	}
	return img, nil
}

func remoteOptions(ctx context.Context, platform v1.Platform) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(platform),
		remote.WithTransport(ociTransport()),
		remote.WithRetryBackoff(remote.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 2}),
	}
}

// ociTransport bounds connection set-up so that an unreachable registry
// fails fast; a reachable one may take as long as its blobs need.
func ociTransport() http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: ociDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = ociDialTimeout
	t.ResponseHeaderTimeout = ociHeaderTimeout
	return t
}

// unreachableError names the source and every way around it.
func unreachableError(image, layer, via string, err error) error {
	ref, _ := name.NewDigest(image)
	reg := "REGISTRY"
	if ref.Name() != "" {
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
	fmt.Fprintf(&b, "  - import a pre-fetched copy into the local store: builder cache import %s OCI-LAYOUT-DIR|OCI-ARCHIVE.tar\n", image)
	if layer != "" {
		fmt.Fprintf(&b, "  - leave the layer out: builder build --exclude-layer %s (recorded in the manifest's excludedLayers)", layer)
	} else {
		b.WriteString("  - leave its layer out: builder build --exclude-layer LAYER (recorded in the manifest's excludedLayers)")
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
		cacheDir = DefaultCacheDir()
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
	ref, err := name.NewDigest(image)
	if err != nil {
		return fmt.Errorf("layer %s: oci image %q: must be pinned by digest: %w", layer, image, err)
	}
	if stErr == nil {
		if _, err := st.Image(ref, v1.Platform{OS: "linux", Architecture: arch}); err == nil {
			return nil
		} else if !errors.Is(err, ErrNotInStore) {
			return fmt.Errorf("layer %s: %w", layer, err)
		}
	}
	pull, via, err := mirrors.Rewrite(ref)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, ociPreflightTimeout)
	defer cancel()
	desc, err := remote.Head(pull,
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(ociTransport()),
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 1, Steps: 1}))
	if err != nil {
		return unreachableError(image, layer, via, err)
	}
	if desc.Digest.String() != ref.DigestStr() {
		return unreachableError(image, layer, via, fmt.Errorf("registry serves digest %s for it", desc.Digest))
	}
	return nil
}

// extractPaths walks the flattened image (whiteouts applied by
// mutate.Extract) and writes each wanted regular file. A wanted path that is
// a symlink inside the image is resolved and its target extracted in a
// second pass, since a tar stream may list a link before or after its target.
func extractPaths(img v1.Image, paths map[string]string, out string) error {
	want := map[string]bool{}
	for from := range paths {
		want[path.Clean("/"+from)] = true
	}
	links := map[string]string{}
	found := map[string]bool{}
	for pass := 0; pass < 2; pass++ {
		if err := extractPass(img, want, links, found, out); err != nil {
			return err
		}
		missing := false
		for p := range want {
			if found[p] {
				continue
			}
			if t, ok := resolveLink(p, links); ok && !found[t] {
				want[t] = true
				missing = true
			}
		}
		if !missing {
			break
		}
	}
	var froms []string
	for from := range paths {
		froms = append(froms, from)
	}
	sort.Strings(froms)
	for _, from := range froms {
		p := path.Clean("/" + from)
		if found[p] {
			continue
		}
		target, ok := resolveLink(p, links)
		if !ok || !found[target] {
			return fmt.Errorf("path %s not found in image (or not a regular file)", p)
		}
		if err := os.Link(filepath.Join(out, fileName(target)), filepath.Join(out, fileName(p))); err != nil {
			return err
		}
	}
	return nil
}

func extractPass(img v1.Image, want map[string]bool, links map[string]string, found map[string]bool, out string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read image filesystem: %w", err)
		}
		p := path.Clean("/" + h.Name)
		switch h.Typeflag {
		case tar.TypeSymlink:
			t := h.Linkname
			if !path.IsAbs(t) {
				t = path.Join(path.Dir(p), t)
			}
			links[p] = t
		case tar.TypeLink:
			links[p] = path.Clean("/" + h.Linkname)
		case tar.TypeReg:
			if !want[p] || found[p] {
				continue
			}
			if err := writeFrom(tr, filepath.Join(out, fileName(p)), h.FileInfo().Mode().Perm()); err != nil {
				return err
			}
			found[p] = true
		}
	}
}

// resolveLink follows symlinks from p, also through linked parent
// directories (/usr/bin -> /bin style), up to 40 hops like the kernel.
func resolveLink(p string, links map[string]string) (string, bool) {
	hops := 0
	for i := 0; i < 40; i++ {
		if t, ok := links[p]; ok {
			p = path.Clean(t)
			hops++
			continue
		}
		// A parent directory may be the link.
		moved := false
		for dir := path.Dir(p); dir != "/" && dir != "."; dir = path.Dir(dir) {
			if t, ok := links[dir]; ok {
				p = path.Join(t, strings.TrimPrefix(p, dir+"/"))
				hops++
				moved = true
				break
			}
		}
		if !moved {
			return p, hops > 0
		}
	}
	return "", false
}

func writeFrom(r io.Reader, dst string, mode os.FileMode) error {
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode|0o200)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// MirrorsEnv names the environment variable holding registry mirrors.
const MirrorsEnv = "OSB_REGISTRY_MIRRORS"

// RegistryMirrors maps a registry host (ghcr.io) to the mirror serving its
// repositories: a host[:port] with an optional path prefix; an http://
// prefix marks a plain-HTTP mirror (localhost and 127.0.0.1 are plain HTTP
// anyway).
type RegistryMirrors map[string]string

// ParseRegistryMirrors reads "ghcr.io=127.0.0.1:5000,docker.io=mirror/hub".
func ParseRegistryMirrors(s string) (RegistryMirrors, error) {
	m := RegistryMirrors{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		from, to, ok := strings.Cut(pair, "=")
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		if !ok || from == "" || to == "" || strings.ContainsAny(from, "/=") {
			return nil, fmt.Errorf("%s: %q: want REGISTRY=MIRROR-HOST[/PREFIX]", MirrorsEnv, pair)
		}
		if strings.HasPrefix(to, "https://") {
			to = strings.TrimPrefix(to, "https://")
		}
		if _, err := name.NewRegistry(strings.SplitN(strings.TrimPrefix(to, "http://"), "/", 2)[0]); err != nil {
			return nil, fmt.Errorf("%s: %q: mirror: %w", MirrorsEnv, pair, err)
		}
		m[from] = strings.TrimSuffix(to, "/")
	}
	return m, nil
}

// RegistryMirrorsFromEnv parses $OSB_REGISTRY_MIRRORS.
func RegistryMirrorsFromEnv() (RegistryMirrors, error) {
	return ParseRegistryMirrors(os.Getenv(MirrorsEnv))
}

// Rewrite returns the reference to pull: ref itself, or the same
// repository and digest on the registry's mirror (then via names it).
func (m RegistryMirrors) Rewrite(ref name.Digest) (name.Digest, string, error) {
	to, ok := m[ref.Context().RegistryStr()]
	if !ok {
		return ref, "", nil
	}
	var opts []name.Option
	if strings.HasPrefix(to, "http://") {
		to = strings.TrimPrefix(to, "http://")
		opts = append(opts, name.Insecure)
	}
	repo := to + "/" + ref.Context().RepositoryStr()
	d, err := name.NewDigest(repo+"@"+ref.DigestStr(), opts...)
	if err != nil {
		return ref, "", fmt.Errorf("mirror %s for %s: %w", to, ref.Context().RegistryStr(), err)
	}
	return d, to, nil
}

// ErrNotInStore means the local OCI store has no image for a digest.
var ErrNotInStore = errors.New("not in the local OCI store")

// OCIStoreDir is where the local OCI store lives inside a cache directory.
func OCIStoreDir(cacheDir string) string { return filepath.Join(cacheDir, "oci-store") }

// refAnnotation records, on each stored manifest, the reference it was
// imported as (the OCI image layout's standard name annotation).
const refAnnotation = "org.opencontainers.image.ref.name"

// OCIStore is an OCI image layout holding images imported for offline
// builds, looked up by manifest digest. go-containerregistry checks every
// blob against its digest when it is read back.
type OCIStore struct {
	path layout.Path
	mu   sync.Mutex
}

// OpenOCIStore opens the store at dir, creating an empty layout if needed.
func OpenOCIStore(dir string) (*OCIStore, error) {
	if p, err := layout.FromPath(dir); err == nil {
		return &OCIStore{path: p}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("oci store: %w", err)
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("oci store %s: %w", dir, err)
	}
	return &OCIStore{path: p}, nil
}

// Image returns the stored image for ref's digest; when the digest names an
// index, the image for platform.
func (s *OCIStore) Image(ref name.Digest, platform v1.Platform) (v1.Image, error) {
	h, err := v1.NewHash(ref.DigestStr())
	if err != nil {
		return nil, err
	}
	idx, err := s.path.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("oci store %s: %w", s.path, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("oci store %s: %w", s.path, err)
	}
	for _, d := range im.Manifests {
		if d.Digest != h {
			continue
		}
		if d.MediaType.IsIndex() {
			child, err := idx.ImageIndex(h)
			if err != nil {
				return nil, fmt.Errorf("oci store: %s: %w", ref, err)
			}
			return imageForPlatform(child, platform, ref.String())
		}
		img, err := idx.Image(h)
		if err != nil {
			return nil, fmt.Errorf("oci store: %s: %w", ref, err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("%s: %w", ref, ErrNotInStore)
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

// Import copies the image or index that src holds for ref into the store,
// after checking that its digest is the one ref pins. src is an OCI image
// layout directory, a tar archive of one (oci-archive), or a tarball
// written by `docker save`/`crane pull` (accepted only if its manifest
// digest still matches, which a re-compressed save rarely does).
func (s *OCIStore) Import(ref name.Digest, src string) (v1.Descriptor, error) {
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
		if err := untar(src, tmp); err != nil {
			return v1.Descriptor{}, fmt.Errorf("%s: %w", src, err)
		}
		dir = tmp
		if _, err := os.Stat(filepath.Join(tmp, "index.json")); err != nil {
			return s.importDockerTarball(ref, want, src)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: not an OCI image layout: %w", src, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", src, err)
	}
	var found []string
	for _, d := range im.Manifests {
		found = append(found, d.Digest.String())
		if d.Digest != want {
			continue
		}
		return s.add(ref, idx, d)
	}
	return v1.Descriptor{}, fmt.Errorf("%s holds no manifest with digest %s (it has: %s): refusing to import a different image", src, want, strings.Join(found, ", "))
}

func (s *OCIStore) add(ref name.Digest, from v1.ImageIndex, d v1.Descriptor) (v1.Descriptor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ann := layout.WithAnnotations(map[string]string{refAnnotation: ref.String()})
	if d.MediaType.IsIndex() {
		child, err := from.ImageIndex(d.Digest)
		if err != nil {
			return d, err
		}
		if err := verifyIndex(child); err != nil {
			return d, err
		}
		return d, s.path.ReplaceIndex(child, match.Digests(d.Digest), ann)
	}
	img, err := from.Image(d.Digest)
	if err != nil {
		return d, err
	}
	if err := verifyImage(img); err != nil {
		return d, err
	}
	return d, s.path.ReplaceImage(img, match.Digests(d.Digest), ann)
}

func (s *OCIStore) importDockerTarball(ref name.Digest, want v1.Hash, src string) (v1.Descriptor, error) {
	img, err := tarball.ImageFromPath(src, nil)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: neither an OCI layout archive nor a docker tarball: %w", src, err)
	}
	got, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	if got != want {
		return v1.Descriptor{}, fmt.Errorf("%s: image digest %s, want %s: a docker-save tarball does not keep the registry's manifest; export an OCI layout instead (crane pull --format=oci, skopeo copy ... oci:DIR)", src, got, want)
	}
	if err := verifyImage(img); err != nil {
		return v1.Descriptor{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return v1.Descriptor{Digest: got}, s.path.ReplaceImage(img, match.Digests(got),
		layout.WithAnnotations(map[string]string{refAnnotation: ref.String()}))
}

// verifyImage reads every layer once, so a corrupt blob (digest mismatch)
// is caught at import, not in a later build.
func verifyImage(img v1.Image) error {
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, rc)
		if cerr := rc.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			d, _ := l.Digest()
			return fmt.Errorf("layer %s: %w", d, err)
		}
	}
	return nil
}

func verifyIndex(idx v1.ImageIndex) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	for _, d := range im.Manifests {
		if d.MediaType.IsIndex() {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return err
		}
		if err := verifyImage(img); err != nil {
			return fmt.Errorf("%s: %w", d.Digest, err)
		}
	}
	return nil
}

// untar unpacks a plain tar archive (an oci-archive) into dir.
func untar(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := writeFrom(tr, p, 0o644); err != nil {
				return err
			}
		}
	}
}
