package artifacts

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"math"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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

type fetch struct {
	done chan struct{}
	err  error
	size int64 // the size the fetch is bounded by
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
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(max(s.FetchTimeout, 0), 30*time.Minute))
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
