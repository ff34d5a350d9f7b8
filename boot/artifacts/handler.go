package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

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
// under /b/<token>/ (see BootURL).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	at := time.Now() // the GET's arrival: evidence counts it only for an attempt begun by then
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
		s.serveBlob(w, r, parts[1], parts[2], at)
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
		s.markServed(r, at)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) serveBlob(w http.ResponseWriter, r *http.Request, digest, name string, at time.Time) {
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
	s.markServed(r, at)
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
