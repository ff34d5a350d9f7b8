// Package artifacts is the HTTP server a booting machine fetches its UKI,
// kernel, initrd, root image and ISO from, straight from the image's blobs
// (registry, OCI layout or local files). Blobs are cached to a local
// directory by digest on first request and verified before they are served,
// so HEAD, Range and Content-Length work like for any static file.
package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/boot"
)

// Source opens a blob by digest: the bytes as stored, whose sha256 is the
// digest. For artifact layers that is the layer's "compressed" stream; the
// server never decompresses (an initrd is a zstd cpio and must stay one).
type Source interface {
	Open(ctx context.Context, digest v1.Hash) (io.ReadCloser, error)
}

// RegistrySource reads blobs from a registry repository.
type RegistrySource struct {
	Repo    name.Repository
	Options []remote.Option
}

func (r RegistrySource) Open(ctx context.Context, d v1.Hash) (io.ReadCloser, error) {
	l, err := remote.Layer(r.Repo.Digest(d.String()), append([]remote.Option{remote.WithContext(ctx)}, r.Options...)...)
	if err != nil {
		return nil, err
	}
	return l.Compressed()
}

// LayoutSource reads blobs from a local OCI image layout.
type LayoutSource struct{ Path layout.Path }

func (l LayoutSource) Open(_ context.Context, d v1.Hash) (io.ReadCloser, error) {
	return l.Path.Blob(d)
}

// FileSource serves local files by their digest (see HashFile).
type FileSource map[v1.Hash]string

func (f FileSource) Open(_ context.Context, d v1.Hash) (io.ReadCloser, error) {
	p, ok := f[d]
	if !ok {
		return nil, fmt.Errorf("no local file with digest %s", d)
	}
	return os.Open(p)
}

// HashFile returns the sha256 digest of a file.
func HashFile(p string) (v1.Hash, error) {
	f, err := os.Open(p)
	if err != nil {
		return v1.Hash{}, err
	}
	defer f.Close()
	h, _, err := v1.SHA256(f)
	return h, err
}

// ErrDigestMismatch means a source delivered bytes that do not hash to the
// digest asked for.
var ErrDigestMismatch = errors.New("digest mismatch")

// Server serves published artifacts and scripts. It listens on one address
// and advertises another (Advertise), since machines often reach it through
// a different address than the one it binds.
type Server struct {
	source    Source
	cacheDir  string
	advertise string

	mu        sync.Mutex
	published map[string]bool   // "<digest>/<name>" published
	scripts   map[string]string // script name -> content
	inflight  map[string]*fetch // digest -> running fetch
	served    map[string]bool   // URL paths served completely by GET
	servedCh  chan struct{}     // closed and replaced whenever served grows
}

type fetch struct {
	done chan struct{}
	err  error
}

// NewServer returns a server reading blobs from source, caching them in
// cacheDir and advertising advertiseURL (e.g. http://10.0.0.5:8080).
func NewServer(source Source, cacheDir, advertiseURL string) (*Server, error) {
	if err := os.MkdirAll(filepath.Join(cacheDir, "sha256"), 0o755); err != nil {
		return nil, fmt.Errorf("artifact cache: %w", err)
	}
	return &Server{source: source, cacheDir: cacheDir, advertise: strings.TrimSuffix(advertiseURL, "/"),
		published: map[string]bool{}, scripts: map[string]string{}, inflight: map[string]*fetch{},
		served: map[string]bool{}, servedCh: make(chan struct{})}, nil
}

// AdvertiseURL is the base URL plans should use (boot.Request.ArtifactBaseURL).
func (s *Server) AdvertiseURL() string { return s.advertise }

var _ boot.Publisher = (*Server)(nil)

// Publish makes artifacts and scripts servable, fetching and verifying every
// blob first, so a missing or corrupt blob fails the plan before the BMC is
// touched rather than when firmware asks for it.
func (s *Server) Publish(ctx context.Context, arts []boot.PublishedArtifact, scripts []boot.Script) error {
	for _, a := range arts {
		d, err := v1.NewHash(a.Digest)
		if err != nil {
			return fmt.Errorf("artifact %s: %w", a.Name, err)
		}
		if _, err := s.cached(ctx, d); err != nil {
			return fmt.Errorf("artifact %s: %w", a.Name, err)
		}
		s.mu.Lock()
		s.published[d.String()+"/"+a.Name] = true
		s.mu.Unlock()
	}
	s.mu.Lock()
	for _, sc := range scripts {
		s.scripts[sc.Name] = sc.Content
	}
	s.mu.Unlock()
	return nil
}

// cached returns the cache path of a verified blob, fetching it once even
// under concurrent requests.
func (s *Server) cached(ctx context.Context, d v1.Hash) (string, error) {
	if d.Algorithm != "sha256" {
		return "", fmt.Errorf("unsupported digest algorithm %s", d.Algorithm)
	}
	p := filepath.Join(s.cacheDir, "sha256", d.Hex)
	for {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		s.mu.Lock()
		f, running := s.inflight[d.String()]
		if !running {
			f = &fetch{done: make(chan struct{})}
			s.inflight[d.String()] = f
		}
		s.mu.Unlock()
		if running {
			select {
			case <-f.done:
				if f.err != nil {
					return "", f.err
				}
				continue
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		f.err = s.fetch(ctx, d, p)
		s.mu.Lock()
		delete(s.inflight, d.String())
		s.mu.Unlock()
		close(f.done)
		if f.err != nil {
			return "", f.err
		}
		return p, nil
	}
}

func (s *Server) fetch(ctx context.Context, d v1.Hash, dst string) error {
	rc, err := s.source.Open(ctx, d)
	if err != nil {
		return fmt.Errorf("opening blob %s: %w", d, err)
	}
	defer rc.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".fetch-*")
	if err != nil {
		return fmt.Errorf("caching blob %s: %w", d, err)
	}
	defer os.Remove(tmp.Name())
	var h hash.Hash = sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), rc); err != nil {
		tmp.Close()
		return fmt.Errorf("fetching blob %s: %w", d, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("caching blob %s: %w", d, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d.Hex {
		return fmt.Errorf("%w: blob %s has sha256:%s", ErrDigestMismatch, d, got)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("caching blob %s: %w", d, err)
	}
	return nil
}

// ContentType is the type served for a file name: firmware looks at it.
func ContentType(name string) string {
	switch strings.ToLower(path.Ext(name)) {
	case ".efi":
		return "application/efi"
	case ".iso":
		return "application/x-iso9660-image"
	case ".ipxe":
		return "text/plain; charset=utf-8"
	}
	return "application/octet-stream"
}

// ServeHTTP serves GET/HEAD /blobs/<digest>/<name> and /ipxe/<name>.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch {
	case len(parts) == 3 && parts[0] == "blobs":
		s.serveBlob(w, r, parts[1], parts[2])
	case len(parts) == 2 && parts[0] == "ipxe":
		s.mu.Lock()
		content, ok := s.scripts[parts[1]]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", ContentType(parts[1]))
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(content))
		s.markServed(r)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, digest, name string) {
	d, err := v1.NewHash(digest)
	if err != nil {
		http.Error(w, "bad digest", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	ok := s.published[d.String()+"/"+name]
	s.mu.Unlock()
	if !ok {
		// Only published artifacts: the server is no open proxy to the registry.
		http.NotFound(w, r)
		return
	}
	p, err := s.cached(r.Context(), d)
	if err != nil {
		http.Error(w, "blob unavailable", http.StatusBadGateway)
		return
	}
	f, err := os.Open(p)
	if err != nil {
		http.Error(w, "blob unavailable", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", ContentType(name))
	// Content-addressed: the bytes behind this URL never change.
	w.Header().Set("ETag", `"`+d.String()+`"`)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	http.ServeContent(w, r, "", time.Time{}, f)
	s.markServed(r)
}

// markServed records a whole-file GET: the evidence that a machine is
// fetching its boot artifact.
func (s *Server) markServed(r *http.Request) {
	if r.Method != http.MethodGet || r.Header.Get("Range") != "" || r.Context().Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.served[r.URL.Path] {
		s.served[r.URL.Path] = true
		close(s.servedCh)
		s.servedCh = make(chan struct{})
	}
}

// FetchEvidence is a boot.EvidenceFunc: the boot counts as seen once the
// machine has fetched the plan's first boot file (UKI, iPXE script, ISO).
// Disk boots and policy None fetch nothing, so they pass at once.
func (s *Server) FetchEvidence() boot.EvidenceFunc {
	return func(ctx context.Context, p *boot.Plan) error {
		want := firstBootFile(p)
		if want == "" {
			return nil
		}
		u, err := url.Parse(want)
		if err != nil {
			return err
		}
		if base, err := url.Parse(s.advertise); err == nil {
			// The advertised URL may carry a prefix a proxy strips.
			u.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(u.Path, base.Path), "/")
		}
		for {
			s.mu.Lock()
			ok, ch := s.served[u.Path], s.servedCh
			s.mu.Unlock()
			if ok {
				return nil
			}
			select {
			case <-ch:
			case <-ctx.Done():
				return fmt.Errorf("machine did not fetch %s: %w", want, ctx.Err())
			}
		}
	}
}

func firstBootFile(p *boot.Plan) string {
	for _, st := range p.Steps {
		if st.Kind != boot.StepPublishArtifacts {
			continue
		}
		if len(st.Scripts) > 0 {
			return st.Scripts[0].URL
		}
		if len(st.Artifacts) > 0 {
			return st.Artifacts[0].URL
		}
	}
	return ""
}

// ListenAndServe serves on addr until ctx ends. ready, if non-nil, receives
// the bound address (useful with ":0").
func (s *Server) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("artifact server: %w", err)
	}
	if ready != nil {
		ready(ln.Addr())
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("artifact server: %w", err)
	}
	return nil
}
