package builder

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/recipe"
)

const ociVersion = "1"

// ociStep copies chosen paths out of an OCI image's flattened filesystem.
// The reference carries a digest, so the digest alone keys the cache entry
// and go-containerregistry verifies every blob it pulls against it.
type ociStep struct {
	src  recipe.OCISource
	arch string
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
	ref, err := name.ParseReference(s.src.Image, name.Insecure)
	if err != nil {
		return fmt.Errorf("image %q: %w", s.src.Image, err)
	}
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: s.arch}))
	if err != nil {
		return fmt.Errorf("pull %s: %w", s.src.Image, err)
	}
	return extractPaths(img, s.src.Paths, out)
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
	for from := range paths {
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

func resolveLink(p string, links map[string]string) (string, bool) {
	for i := 0; i < 40; i++ {
		t, ok := links[p]
		if !ok {
			return p, i > 0
		}
		p = t
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
