package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/boot"
)

// hostileRegistry answers every blob GET with body(w) (chunked: no
// Content-Length for the client to check) and counts the bytes it sent.
func hostileRegistry(t *testing.T, body func(w http.ResponseWriter, r *http.Request, sent *atomic.Int64)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var sent atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.Path, "/blobs/") {
			w.WriteHeader(http.StatusOK) // /v2/: no auth
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		body(w, r, &sent)
	}))
	t.Cleanup(ts.Close)
	return ts, &sent
}

// write sends b in chunks, flushing each, until done or the client leaves.
func write(w http.ResponseWriter, r *http.Request, sent *atomic.Int64, b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), 32<<10)
		if _, err := w.Write(b[:n]); err != nil || r.Context().Err() != nil {
			return false
		}
		w.(http.Flusher).Flush()
		sent.Add(int64(n))
		b = b[n:]
	}
	return true
}

// TestFetchBoundedBySize: a fetch is bounded by the descriptor's size. A
// registry that streams without end (or sends more than declared) used
// to be read until it stopped or FetchTimeout (30 minutes) passed, all of
// it written to the artifact cache; now reading stops after Size+1 bytes,
// the error names the artifact and its size, and nothing stays in the
// cache.
func TestFetchBoundedBySize(t *testing.T) {
	blob := bytes.Repeat([]byte("disk"), 64<<10) // 256 KiB
	sum := sha256.Sum256(blob)
	d := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	endless := func(w http.ResponseWriter, r *http.Request, sent *atomic.Int64) {
		write(w, r, sent, blob)
		chunk := bytes.Repeat([]byte{0}, 32<<10)
		for write(w, r, sent, chunk) {
		}
	}
	tests := []struct {
		name string
		body func(w http.ResponseWriter, r *http.Request, sent *atomic.Int64)
		size int64
		want string
	}{
		{"endless", endless, int64(len(blob)), "more than the 262144 bytes"},
		{"one byte more", func(w http.ResponseWriter, r *http.Request, sent *atomic.Int64) {
			write(w, r, sent, append(append([]byte(nil), blob...), 'x'))
		}, int64(len(blob)), "more than the 262144 bytes"},
		{"declared smaller", func(w http.ResponseWriter, r *http.Request, sent *atomic.Int64) {
			write(w, r, sent, blob)
		}, int64(len(blob)) - 1, "more than the 262143 bytes"},
		{"short", func(w http.ResponseWriter, r *http.Request, sent *atomic.Int64) {
			write(w, r, sent, blob[:1000])
		}, int64(len(blob)), "1000 of the 262144 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg, sent := hostileRegistry(t, tc.body)
			repo, err := name.NewRepository(strings.TrimPrefix(reg.URL, "http://")+"/os/disk", name.Insecure)
			if err != nil {
				t.Fatal(err)
			}
			cache := privateDir(t)
			srv, err := NewServer(RegistrySource{Repo: repo}, cache, "http://x")
			if err != nil {
				t.Fatal(err)
			}
			srv.Logf = func(string, ...any) {}
			srv.FetchTimeout = 20 * time.Second
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			start := time.Now()
			err = srv.Publish(ctx, []boot.PublishedArtifact{{Artifact: boot.Artifact{Digest: d.String(), Size: tc.size, Name: "disk.raw"}}}, nil)
			if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "disk.raw") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Publish after %s: %v, want an error naming disk.raw and %q", time.Since(start).Round(time.Millisecond), err, tc.want)
			}
			// What the registry got out before the client hung up: the
			// declared size, plus what the sockets buffer.
			if n := sent.Load(); n > tc.size+32<<20 {
				t.Errorf("registry sent %d bytes for a %d-byte blob", n, tc.size)
			}
			left, _ := filepath.Glob(filepath.Join(cache, "sha256", "*"))
			hidden, _ := filepath.Glob(filepath.Join(cache, "sha256", ".*"))
			if len(left)+len(hidden) > 0 {
				t.Errorf("cache keeps %q %q", left, hidden)
			}
			if rec := get(t, srv, "/blobs/"+d.String()+"/disk.raw"); rec.Code != http.StatusNotFound {
				t.Errorf("unpublished blob served: %d", rec.Code)
			}
		})
	}
}

// TestCachedBlobSizeChecked: a blob already cached (and hashing right) is
// still refused for an artifact that declares another size: the size is
// part of what the descriptor promises.
func TestCachedBlobSizeChecked(t *testing.T) {
	blob := []byte("kernel bytes")
	p, sum := writeFile(t, t.TempDir(), "vmlinuz", blob)
	srv, err := NewServer(FileSource{sum: p}, privateDir(t), "http://x")
	if err != nil {
		t.Fatal(err)
	}
	srv.Logf = func(string, ...any) {}
	pub := func(size int64) error {
		return srv.Publish(t.Context(), []boot.PublishedArtifact{{Artifact: boot.Artifact{Digest: sum.String(), Size: size, Name: "vmlinuz"}}}, nil)
	}
	if err := pub(int64(len(blob))); err != nil {
		t.Fatal(err)
	}
	if err := pub(int64(len(blob)) + 1); err == nil || !strings.Contains(err.Error(), "vmlinuz") {
		t.Errorf("declared size off by one: %v", err)
	}
	if err := pub(-1); err == nil {
		t.Errorf("negative size accepted")
	}
	_ = os.Remove(p)
}
