package sources

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/ocistore"
	"github.com/ironcore-dev/os-builder/recipe"
)

// ociVersion 2: outputs are only made from verified blobs; entries filled
// before (from a store that did not verify) are not reused.
const ociVersion = "2"

// OCI copies chosen paths out of an OCI image's flattened filesystem.
// The reference carries a digest, so the digest alone keys the cache entry,
// and every blob is checked against it as it is read: by the local OCI
// store (ocistore) when the image was imported there (`builder cache
// import`), otherwise by go-containerregistry as it pulls from the registry
// or that registry's mirror (OSB_REGISTRY_MIRRORS).
type OCI struct {
	src  recipe.OCISource
	arch string
	// storeDir is the local OCI store; empty means OCIStoreDir(cache.DefaultDir()).
	storeDir string
}

func (s *OCI) Name() string { return "oci:" + s.src.Image }

func (s *OCI) Inputs() (cache.Inputs, error) {
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

// NewOCI is the step that takes src's paths from its image for arch, out of
// the local OCI store at storeDir ("": the default cache's) or a registry.
func NewOCI(src recipe.OCISource, arch, storeDir string) *OCI {
	return &OCI{src: src, arch: arch, storeDir: storeDir}
}

// Binaries are the files the step's output out holds, each bound for its
// path in the root.
func (s *OCI) Binaries(out string) ([]step.Binary, error) {
	in, err := s.Inputs()
	if err != nil {
		return nil, err
	}
	var bins []step.Binary
	for from, to := range s.src.Paths {
		bins = append(bins, step.Binary{Src: filepath.Join(out, fileName(from)), Dest: to, Step: s.Name(), StepKey: in.Key()})
	}
	sort.Slice(bins, func(i, j int) bool { return bins[i].Dest < bins[j].Dest })
	return bins, nil
}

func (s *OCI) Run(ctx context.Context, out string) error {
	img, err := s.image(ctx)
	if err != nil {
		return err
	}
	if err := extractPaths(img, s.src.Paths, out); err != nil {
		return fmt.Errorf("oci source %s: %w", s.src.Image, err)
	}
	return nil
}

func (s *OCI) store() string {
	if s.storeDir != "" {
		return s.storeDir
	}
	return OCIStoreDir(cache.DefaultDir())
}

// image finds the source image: the local store first, then the registry.
func (s *OCI) image(ctx context.Context) (v1.Image, error) {
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

// OCIStore is the local OCI store (package ocistore) that `builder cache
// import` fills and the oci step reads first.
type OCIStore = ocistore.Store

// ErrNotInStore means the local OCI store has no image for a digest.
var ErrNotInStore = ocistore.ErrNotFound

// OCIStoreDir is where the local OCI store lives inside a cache directory.
func OCIStoreDir(cacheDir string) string { return filepath.Join(cacheDir, "oci-store") }

// OpenOCIStore opens the store at dir, creating an empty one if needed.
func OpenOCIStore(dir string) (*OCIStore, error) { return ocistore.Open(dir) }

// extractPaths walks the flattened image and writes each wanted regular
// file. A wanted path that is a symlink inside the image is resolved and
// its target extracted in a second pass, since a tar stream may list a link
// before or after its target. Only out is written to: file names are image
// paths with "/" replaced (fileName), never joined paths.
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
	return walkImage(img, func(h *tar.Header, r io.Reader) error {
		p := h.Name
		switch h.Typeflag {
		case tar.TypeSymlink:
			t := h.Linkname
			if !path.IsAbs(t) {
				t = path.Join(path.Dir(p), t)
			}
			links[p] = t
		case tar.TypeLink:
			links[p] = path.Clean("/" + h.Linkname)
		case tar.TypeReg, tar.TypeGNUSparse:
			if !want[p] || found[p] {
				return nil
			}
			if sparse(h) {
				// Its holes are not in the layer: a few bytes would
				// write the declared size (any size) as zeros.
				return fmt.Errorf("%s: a sparse file; a binary from an image must be a plain file", p)
			}
			if err := writeFrom(r, filepath.Join(out, fileName(p)), h.FileInfo().Mode().Perm()); err != nil {
				return err
			}
			found[p] = true
		}
		return nil
	})
}

// sparse says whether h is a GNU sparse file (old GNU format, or PAX
// GNU.sparse records, which archive/tar reads as a regular file).
func sparse(h *tar.Header) bool {
	if h.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// walkImage calls fn for every entry of the image's flattened filesystem,
// top layer first, with h.Name cleaned to an absolute path. What an upper
// layer decides hides the layers below: an entry for the same path, a
// whiteout (.wh.NAME) of it or of a parent, a non-directory at a parent, an
// opaque directory (.wh..wh..opq). Each layer is read to its very end and
// closed with errors checked: blob digests are verified at EOF (by ocistore
// and by go-containerregistry's remote), and a tar stream ends before its
// blob does, so stopping at the tar end would skip the check.
func walkImage(img v1.Image, fn func(h *tar.Header, r io.Reader) error) error {
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("read image layers: %w", err)
	}
	hides := map[string]bool{} // path decided above -> it hides what lies under it
	opaque := map[string]bool{}
	for i := len(layers) - 1; i >= 0; i-- {
		if err := walkLayer(layers[i], hides, opaque, fn); err != nil {
			d, _ := layers[i].Digest()
			return fmt.Errorf("layer %s: %w", d, err)
		}
	}
	return nil
}

func walkLayer(l v1.Layer, hides, opaque map[string]bool, fn func(*tar.Header, io.Reader) error) (err error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := rc.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	var opaqueHere []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		name := path.Clean("/" + h.Name)
		dir, base := path.Split(name)
		if base == ".wh..wh..opq" {
			opaqueHere = append(opaqueHere, path.Clean(dir))
			continue
		}
		whiteout := strings.HasPrefix(base, ".wh.")
		if whiteout {
			name = path.Join(dir, strings.TrimPrefix(base, ".wh."))
		}
		if _, decided := hides[name]; decided || hidden(name, hides, opaque) {
			continue
		}
		hides[name] = whiteout || h.Typeflag != tar.TypeDir
		if whiteout {
			continue
		}
		h.Name = name
		if err := fn(h, tr); err != nil {
			return err
		}
	}
	for _, d := range opaqueHere {
		opaque[d] = true
	}
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return fmt.Errorf("read layer: %w", err)
	}
	return nil
}

// hidden says whether a parent of p was whited out, is not a directory, or
// is opaque in an upper layer.
func hidden(p string, hides, opaque map[string]bool) bool {
	for dir := path.Dir(p); ; dir = path.Dir(dir) {
		if hides[dir] || opaque[dir] {
			return true
		}
		if dir == "/" {
			return false
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
