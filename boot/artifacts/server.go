// Package artifacts is the HTTP server a booting machine fetches its UKI,
// kernel, initrd, root image and ISO from, straight from the image's blobs
// (registry, OCI layout or local files). Blobs are cached to a private
// local directory by digest and verified (once per process) before they
// are served, so HEAD, Range and Content-Length work like for any static
// file.
package artifacts

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/boot"
)

// Server serves published artifacts and scripts. It listens on one address
// and advertises another (Advertise), since machines often reach it through
// a different address than the one it binds.
type Server struct {
	// Logf receives why a blob could not be fetched or why a cached one was
	// replaced; default log.Printf. Set it before serving.
	Logf func(format string, args ...any)
	// FetchTimeout bounds one fetch of a blob from the source; default 30
	// minutes (a multi-GiB disk image from a remote registry).
	FetchTimeout time.Duration

	source    Source
	cache     *blobCache
	advertise string
	timeouts  timeouts

	mu        sync.Mutex
	published map[string]int64       // "<digest>/<name>" published -> declared size
	scripts   map[string]string      // script name -> content
	inflight  map[string]*fetch      // digest -> running fetch
	verified  map[string]int64       // digests whose cached bytes were hashed in this process -> size
	served    map[string][]servedGET // URL paths served completely by GET -> by whom, when
	bootKey   []byte                 // makes boot tokens (BootURL)
	servedCh  chan struct{}          // closed and replaced whenever served grows
}

// timeouts of the HTTP server. Requests are GET/HEAD: the header is the
// whole request. Responses are blobs of up to GiBs to firmware of unknown
// speed, so no WriteTimeout can bound a whole download: blob bodies get a
// write deadline per chunk instead (writeStall: a client that takes
// nothing for that long is cut), and WriteTimeout bounds the rest.
type timeouts struct {
	readHeader, read, write, idle, writeStall time.Duration
	writeChunk                                int64
}

var defaultTimeouts = timeouts{
	readHeader: 10 * time.Second,
	read:       30 * time.Second,
	write:      2 * time.Minute,
	idle:       2 * time.Minute,
	writeStall: time.Minute,
	writeChunk: 1 << 20, // 1 MiB per writeStall: clients slower than ~17 KiB/s are cut
}

// NewServer returns a server reading blobs from source, caching them in
// cacheDir (default: DefaultCacheDir) and advertising advertiseURL (e.g.
// http://10.0.0.5:8080). The cache directory is created 0700 and refused
// unless it is a directory of the effective uid without group/other
// access.
func NewServer(source Source, cacheDir, advertiseURL string) (*Server, error) {
	if cacheDir == "" {
		var err error
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return nil, fmt.Errorf("%w: %w", errCache, err)
		}
	}
	cache, err := openCache(cacheDir)
	if err != nil {
		return nil, err
	}
	key, err := cache.bootKey()
	if err != nil {
		return nil, err
	}
	return &Server{source: source, cache: cache, advertise: strings.TrimSuffix(advertiseURL, "/"), timeouts: defaultTimeouts,
		published: map[string]int64{}, scripts: map[string]string{}, inflight: map[string]*fetch{}, verified: map[string]int64{},
		served: map[string][]servedGET{}, servedCh: make(chan struct{}), bootKey: key}, nil
}

func (s *Server) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// AdvertiseURL is the base URL plans should use (boot.Request.ArtifactBaseURL).
func (s *Server) AdvertiseURL() string { return s.advertise }

var _ boot.Publisher = (*Server)(nil)

// Publish makes artifacts and scripts servable, fetching and verifying every
// blob first (digest and the descriptor's size), so a missing or corrupt
// blob fails the plan before the BMC is touched rather than when firmware
// asks for it.
func (s *Server) Publish(ctx context.Context, arts []boot.PublishedArtifact, scripts []boot.Script) error {
	for _, a := range arts {
		d, err := v1.NewHash(a.Digest)
		if err != nil {
			return fmt.Errorf("artifact %s: %w", a.Name, err)
		}
		if err := s.ready(ctx, d, a.Size); err != nil {
			return fmt.Errorf("artifact %s: %w", a.Name, err)
		}
		s.mu.Lock()
		s.published[d.String()+"/"+a.Name] = a.Size
		s.mu.Unlock()
	}
	s.mu.Lock()
	for _, sc := range scripts {
		s.scripts[sc.Name] = sc.Content
	}
	s.mu.Unlock()
	return nil
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
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends. Callers that drive a BMC listen first
// and serve after, so a boot never starts against an address that is not
// served (or cannot be bound).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := s.httpServer()
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

// httpServer is the server ListenAndServe runs: timeouts bound slow or
// stalled clients (see timeouts), headers are bounded in size.
func (s *Server) httpServer() *http.Server {
	return &http.Server{Handler: s, ReadHeaderTimeout: s.timeouts.readHeader, ReadTimeout: s.timeouts.read,
		WriteTimeout: s.timeouts.write, IdleTimeout: s.timeouts.idle, MaxHeaderBytes: 64 << 10}
}
