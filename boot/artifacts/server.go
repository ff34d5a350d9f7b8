// Package artifacts is the HTTP server a booting machine fetches its UKI,
// kernel, initrd, root image and ISO from, straight from the image's blobs
// (registry, OCI layout or local files). Blobs are cached to a private
// local directory by digest and verified (once per process) before they
// are served, so HEAD, Range and Content-Length work like for any static
// file.
package artifacts

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"slices"
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

// ErrSizeMismatch means a blob is not the size its descriptor declares: a
// source that sends more (or endlessly) is cut after one byte too many.
var ErrSizeMismatch = errors.New("size mismatch")

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
	published map[string]int64        // "<digest>/<name>" published -> declared size
	scripts   map[string]string       // script name -> content
	inflight  map[string]*fetch       // digest -> running fetch
	verified  map[string]int64        // digests whose cached bytes were hashed in this process -> size
	served    map[string][]netip.Addr // URL paths served completely by GET -> client addresses
	bootKey   []byte                  // makes boot tokens (BootURL)
	servedCh  chan struct{}           // closed and replaced whenever served grows
}

type fetch struct {
	done chan struct{}
	err  error
	size int64 // the size the fetch is bounded by
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
		served: map[string][]netip.Addr{}, servedCh: make(chan struct{}), bootKey: key}, nil
}

// Boot tokens bind boot evidence to one boot: a plan resolved with
// ArtifactBaseURL = BootURL(id) has every URL under /boot/<token>/, and
// FetchEvidence counts only a GET of that exact URL, which only a client
// that got it from this boot's plan (override, iPXE script, media) knows.
// The token is an HMAC of the boot's id under a key kept in the private
// cache directory: nobody else can make one, and a restarted server makes
// the same one (a resumed plan keeps its digest and its URLs).
const (
	bootPrefix   = "boot"
	bootTokenLen = 32 // hex digits: 128 bits
)

// BootURL is the base URL for the plan of one boot: the advertised URL
// plus /boot/<token>, the token made from bootID (e.g. the BMC's URL and
// the image reference).
func (s *Server) BootURL(bootID string) string {
	return s.advertise + "/" + bootPrefix + "/" + bootToken(s.bootKey, bootID)
}

// BootURL is Server.BootURL before the server exists (a plan is resolved
// before the artifact server is started): the token is made with the key
// in cacheDir (default DefaultCacheDir), the one the server will use.
func BootURL(advertiseURL, cacheDir, bootID string) (string, error) {
	if cacheDir == "" {
		var err error
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return "", fmt.Errorf("%w: %w", errCache, err)
		}
	}
	c, err := openCache(cacheDir)
	if err != nil {
		return "", err
	}
	defer c.close()
	key, err := c.bootKey()
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(advertiseURL, "/") + "/" + bootPrefix + "/" + bootToken(key, bootID), nil
}

func bootToken(key []byte, bootID string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("os-builder boot token\x00" + bootID))
	return hex.EncodeToString(m.Sum(nil))[:bootTokenLen]
}

func validBootToken(t string) bool {
	if len(t) != bootTokenLen {
		return false
	}
	for _, c := range t {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
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

// ready returns once the blob is cached and verified in this process, and
// is size bytes long. The first caller starts one shared fetch, bounded by
// its size; it runs detached from every caller's context (bounded by
// FetchTimeout), so a caller that leaves, such as a client disconnecting,
// fails nobody else.
func (s *Server) ready(ctx context.Context, d v1.Hash, size int64) error {
	if d.Algorithm != "sha256" || len(d.Hex) != sha256.Size*2 {
		return fmt.Errorf("unsupported digest %s", d)
	}
	if size < 0 || size == math.MaxInt64 {
		return fmt.Errorf("blob %s: %w: declared size %d", d, ErrSizeMismatch, size)
	}
	s.mu.Lock()
	if got, ok := s.verified[d.Hex]; ok {
		s.mu.Unlock()
		return sizeMatches(d, got, size)
	}
	f, running := s.inflight[d.Hex]
	if !running {
		f = &fetch{done: make(chan struct{}), size: size}
		s.inflight[d.Hex] = f
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), orDefault(s.FetchTimeout, 30*time.Minute))
		go func() {
			defer cancel()
			err := s.ensure(fctx, d, size)
			if err != nil {
				s.logf("artifact server: blob %s unavailable: %v", d, err)
			}
			s.mu.Lock()
			f.err = err
			delete(s.inflight, d.Hex)
			if err == nil {
				s.verified[d.Hex] = size
			}
			s.mu.Unlock()
			close(f.done)
		}()
	}
	s.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return f.err
		}
		// Another caller's fetch: its size is the blob's.
		return sizeMatches(d, f.size, size)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sizeMatches compares a verified blob's size with a declared one.
func sizeMatches(d v1.Hash, got, declared int64) error {
	if got != declared {
		return fmt.Errorf("blob %s: %w: %d bytes, not the %d its descriptor declares", d, ErrSizeMismatch, got, declared)
	}
	return nil
}

// ensure makes the cache hold the blob: a cached copy is hashed first (it
// may predate this process: planted, truncated, bit-rotted) and replaced by
// a fetch unless it matches. A fetch reads at most size+1 bytes.
func (s *Server) ensure(ctx context.Context, d v1.Hash, size int64) error {
	ok, got, n, err := s.cache.verify(d.Hex)
	switch {
	case ok:
		// The bytes are the blob's; a descriptor that says otherwise is wrong.
		return sizeMatches(d, n, size)
	case err == nil:
		s.logf("artifact server: cached %s has sha256:%s, not its digest; fetching it again", s.cache.path(d.Hex), got)
	case errors.Is(err, errNotRegular):
		s.logf("artifact server: refusing cached %v; fetching it again", err)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return s.fetch(ctx, d, size)
}

// fetch copies the blob from the source into the cache, reading no more
// than size+1 bytes: a source that sends more than the descriptor declares
// (a hostile registry streaming without end) is cut there, and the temp
// file is removed.
func (s *Server) fetch(ctx context.Context, d v1.Hash, size int64) error {
	rc, err := s.source.Open(ctx, d)
	if err != nil {
		return fmt.Errorf("opening blob %s: %w", d, err)
	}
	defer rc.Close()
	tmp, tmpName, err := s.cache.create()
	if err != nil {
		return err
	}
	defer s.cache.remove(tmpName)
	var h hash.Hash = sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(rc, size+1))
	if cerr := tmp.Close(); cerr != nil && err == nil {
		return fmt.Errorf("%w: caching blob %s: %w", errCache, d, cerr)
	}
	switch {
	case n > size: // whatever else the source says about it
		return fmt.Errorf("%w: the source of blob %s sends more than the %d bytes its descriptor declares", ErrSizeMismatch, d, size)
	case err != nil:
		return fmt.Errorf("fetching blob %s: after %d of the %d bytes: %w", d, n, size, err)
	case n < size:
		return fmt.Errorf("%w: the source of blob %s ended after %d of the %d bytes", ErrSizeMismatch, d, n, size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d.Hex {
		return fmt.Errorf("%w: blob %s has sha256:%s", ErrDigestMismatch, d, got)
	}
	return s.cache.commit(tmpName, d.Hex)
}

// open returns the verified cached blob, fetching it first if needed.
func (s *Server) open(ctx context.Context, d v1.Hash, size int64) (*os.File, error) {
	for range 2 {
		if err := s.ready(ctx, d, size); err != nil {
			return nil, err
		}
		f, err := s.cache.open(d.Hex)
		if err == nil {
			return f, nil
		}
		// Gone or replaced since it was verified: verify (fetch) again.
		s.logf("artifact server: verified blob %s no longer usable: %v", d, err)
		s.mu.Lock()
		delete(s.verified, d.Hex)
		s.mu.Unlock()
	}
	return nil, fmt.Errorf("%w: blob %s keeps disappearing from the cache", errCache, d)
}

func orDefault(v, def time.Duration) time.Duration {
	if v > 0 {
		return v
	}
	return def
}

// fetchStatus is the HTTP answer to a blob that could not be made ready.
func fetchStatus(err error) int {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	case errors.Is(err, errCache):
		return http.StatusInternalServerError
	}
	return http.StatusBadGateway // the source failed or lied (ErrDigestMismatch)
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

// ServeHTTP serves GET/HEAD /blobs/<digest>/<name> and /ipxe/<name>, also
// under /boot/<token>/ (see BootURL).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if parts[0] == bootPrefix {
		if len(parts) < 2 || !validBootToken(parts[1]) {
			http.NotFound(w, r)
			return
		}
		// Served like any client's GET; only evidence looks at the token.
		parts = parts[2:]
	}
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
	size, ok := s.published[d.String()+"/"+name]
	s.mu.Unlock()
	if !ok {
		// Only published artifacts: the server is no open proxy to the registry.
		http.NotFound(w, r)
		return
	}
	sw := &stallWriter{ResponseWriter: w, rc: http.NewResponseController(w), stall: s.timeouts.writeStall, chunk: s.timeouts.writeChunk}
	f, err := s.open(r.Context(), d, size)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client left; the fetch goes on for the others
		}
		// The cause is logged once per fetch (ready); the client gets it too.
		http.Error(sw, fmt.Sprintf("blob %s unavailable: %v", d, err), fetchStatus(err))
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", ContentType(name))
	// Content-addressed: the bytes behind this URL never change.
	w.Header().Set("ETag", `"`+d.String()+`"`)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	http.ServeContent(sw, r, "", time.Time{}, f)
	s.markServed(r)
}

// stallWriter gives every chunk of a response its own write deadline: a
// download may take as long as it needs while it moves, and a client that
// stops reading is cut after stall. ReadFrom keeps sendfile working.
type stallWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
	chunk int64
}

func (w *stallWriter) extend() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.stall)) }

func (w *stallWriter) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *stallWriter) Write(p []byte) (int, error) {
	var n int
	for len(p) > 0 {
		w.extend()
		m, err := w.ResponseWriter.Write(p[:min(int64(len(p)), w.chunk)])
		n += m
		if err != nil {
			return n, err
		}
		p = p[m:]
	}
	return n, nil
}

func (w *stallWriter) ReadFrom(src io.Reader) (int64, error) {
	rf, ok := w.ResponseWriter.(io.ReaderFrom)
	if !ok {
		return io.Copy(struct{ io.Writer }{w}, src)
	}
	// sendfile sees through one *io.LimitedReader around an *os.File
	// (http.ServeContent passes one), so chunk with a LimitedReader of the
	// same file.
	lr, ok := src.(*io.LimitedReader)
	if !ok {
		lr = &io.LimitedReader{R: src, N: math.MaxInt64}
	}
	var total int64
	for lr.N > 0 {
		w.extend()
		want := min(lr.N, w.chunk)
		n, err := rf.ReadFrom(&io.LimitedReader{R: lr.R, N: want})
		total += n
		lr.N -= n
		if err != nil || n < want {
			return total, err
		}
	}
	return total, nil
}

// Unwrap lets http.ResponseController reach the connection.
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// markServed records a whole-file GET and who made it: the evidence that
// a machine is fetching its boot artifact.
func (s *Server) markServed(r *http.Request) {
	if r.Method != http.MethodGet || r.Header.Get("Range") != "" || r.Context().Err() != nil {
		return
	}
	var from netip.Addr
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		from = ap.Addr().Unmap()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.served[r.URL.Path], from) {
		s.served[r.URL.Path] = append(s.served[r.URL.Path], from)
		close(s.servedCh)
		s.servedCh = make(chan struct{})
	}
}

// ErrNoBootToken means a plan's URLs carry no boot token: any client's GET
// of them would pass for the machine's (see BootURL).
var ErrNoBootToken = errors.New("the plan's artifact URLs carry no boot token (resolve it with ArtifactBaseURL from artifacts.Server.BootURL)")

// FetchEvidence is a boot.EvidenceFunc: the boot counts as seen once the
// machine has fetched the plan's first boot file (UKI, iPXE script, ISO)
// by its URL, boot token included; with from, only a GET from one of
// these addresses counts (where the machine's address is known). A plan
// without a boot token is refused (ErrNoBootToken). Disk boots and policy
// None fetch nothing, so they pass at once.
func (s *Server) FetchEvidence(from ...netip.Addr) boot.EvidenceFunc {
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
		if parts := strings.SplitN(strings.TrimPrefix(u.Path, "/"), "/", 3); len(parts) < 3 || parts[0] != bootPrefix || !validBootToken(parts[1]) {
			return fmt.Errorf("boot evidence for %s: %w", want, ErrNoBootToken)
		}
		counts := func(addrs []netip.Addr) bool {
			if len(from) == 0 {
				return len(addrs) > 0
			}
			return slices.ContainsFunc(addrs, func(a netip.Addr) bool {
				return slices.ContainsFunc(from, func(f netip.Addr) bool { return f.Unmap() == a })
			})
		}
		for {
			s.mu.Lock()
			ok, ch := counts(s.served[u.Path]), s.servedCh
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
