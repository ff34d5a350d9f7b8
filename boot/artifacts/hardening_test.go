package artifacts

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/boot"
)

// logBuffer collects a server's log lines.
type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuffer) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// loggedServer is a server of src caching in cache, whose log lines go to
// the buffer it returns.
func loggedServer(t testing.TB, src Source, cache string) (*Server, *logBuffer) {
	t.Helper()
	srv, err := NewServer(src, cache, "http://x")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	srv.Logf = logs.logf
	return srv, logs
}

func publish(t testing.TB, srv *Server, d v1.Hash, size int, name string) error {
	t.Helper()
	return srv.Publish(t.Context(), []boot.PublishedArtifact{{Artifact: boot.Artifact{Digest: d.String(), Size: int64(size), Name: name}}}, nil)
}

func get(t testing.TB, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	return rec
}

func TestCacheDirRefused(t *testing.T) {
	type setup func(t *testing.T) string
	mkdir := func(perm os.FileMode) setup {
		return func(t *testing.T) string {
			d := filepath.Join(t.TempDir(), "cache")
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(d, perm); err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	tests := []struct {
		name  string
		setup setup
		want  string
	}{
		{"world writable", mkdir(0o777), "mode 0777 gives group/other access"},
		{"group readable", mkdir(0o750), "mode 0750 gives group/other access"},
		{"foreign owner", func(t *testing.T) string {
			if os.Geteuid() != 0 {
				t.Skip("chown needs root")
			}
			d := mkdir(0o700)(t)
			if err := os.Chown(d, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			return d
		}, "owned by uid 65534, not by this process's uid 0"},
		{"symlink", func(t *testing.T) string {
			d := mkdir(0o700)(t)
			l := filepath.Join(t.TempDir(), "link")
			if err := os.Symlink(d, l); err != nil {
				t.Fatal(err)
			}
			return l
		}, "is a symlink or not a directory"},
		{"a file", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, "not a directory"},
		{"sha256 group writable", func(t *testing.T) string {
			d := mkdir(0o700)(t)
			if err := os.Mkdir(filepath.Join(d, "sha256"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(d, "sha256"), 0o770); err != nil {
				t.Fatal(err)
			}
			return d
		}, "sha256: mode 0770 gives group/other access"},
		{"sha256 symlink", func(t *testing.T) string {
			d := mkdir(0o700)(t)
			if err := os.Symlink(t.TempDir(), filepath.Join(d, "sha256")); err != nil {
				t.Fatal(err)
			}
			return d
		}, "sha256: is a symlink or not a directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.setup(t)
			_, err := NewServer(FileSource{}, dir, "http://x")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "artifact cache "+dir) {
				t.Fatalf("err = %v, want it to name %s and say %q", err, dir, tc.want)
			}
		})
	}
}

func TestDefaultCacheDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_CACHE_HOME", "")
	if d, err := DefaultCacheDir(); err != nil || d != filepath.Join(home, ".cache/os-builder/artifacts") {
		t.Errorf("HOME: %s %v", d, err)
	}
	xdg := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", xdg)
	d, err := DefaultCacheDir()
	if err != nil || d != filepath.Join(xdg, "os-builder/artifacts") {
		t.Fatalf("XDG_CACHE_HOME: %s %v", d, err)
	}
	// The default is created private.
	if _, err := NewServer(FileSource{}, "", "http://x"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{d, filepath.Join(d, "sha256")} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want 0700", p, fi.Mode(), err)
		}
	}
}

// TestPlantedBlobNotServed: whatever sits in the cache under a digest
// before this process verified it (wrong bytes, a symlink to a host file, a
// FIFO) is never served; the server fetches the real blob over it.
func TestPlantedBlobNotServed(t *testing.T) {
	blob := []byte("the real uki")
	src, sum := writeFile(t, t.TempDir(), "uki.efi", blob)
	hostFile := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(hostFile, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, wantLog string
		plant         func(p string) error
	}{
		{"wrong bytes", "has sha256:", func(p string) error { return os.WriteFile(p, []byte("planted kernel"), 0o600) }},
		{"truncated", "has sha256:", func(p string) error { return os.WriteFile(p, blob[:4], 0o600) }},
		{"symlink to a host file", "is a symlink", func(p string) error { return os.Symlink(hostFile, p) }},
		{"fifo", "not a regular file", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cache := privateDir(t)
			if err := os.MkdirAll(filepath.Join(cache, "sha256"), 0o700); err != nil {
				t.Fatal(err)
			}
			planted := filepath.Join(cache, "sha256", sum.Hex)
			if err := tc.plant(planted); err != nil {
				t.Fatal(err)
			}
			srv, logs := loggedServer(t, FileSource{sum: src}, cache)
			done := make(chan error, 1)
			go func() { done <- publish(t, srv, sum, len(blob), "uki.efi") }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Publish hangs on the planted entry")
			}
			rec := get(t, srv, "/blobs/"+sum.String()+"/uki.efi")
			if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), blob) {
				t.Fatalf("served %d %q, want the real blob", rec.Code, rec.Body.String())
			}
			if !strings.Contains(logs.String(), tc.wantLog) || !strings.Contains(logs.String(), "fetching it again") {
				t.Errorf("log %q, want %q", logs.String(), tc.wantLog)
			}
			if fi, err := os.Lstat(planted); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("cache entry: %v %v, want a regular file", fi.Mode(), err)
			}
			if b, _ := os.ReadFile(hostFile); string(b) != "host secret" {
				t.Errorf("host file changed: %q", b)
			}
		})
	}
}

// TestVerifiedOncePerProcess: a verified blob is not hashed again for
// every request; a blob removed after verification is fetched again.
func TestVerifiedOncePerProcess(t *testing.T) {
	blob := []byte("vmlinuz bytes")
	src, sum := writeFile(t, t.TempDir(), "vmlinuz", blob)
	cache := privateDir(t)
	srv, logs := loggedServer(t, FileSource{sum: src}, cache)
	if err := publish(t, srv, sum, len(blob), "vmlinuz"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(cache, "sha256", sum.Hex)); err != nil {
		t.Fatal(err)
	}
	if rec := get(t, srv, "/blobs/"+sum.String()+"/vmlinuz"); rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), blob) {
		t.Fatalf("after removal: %d %q", rec.Code, rec.Body.String())
	}
	if !strings.Contains(logs.String(), "no longer usable") {
		t.Errorf("log %q", logs.String())
	}
}

// gatedRegistry is a real registry whose blob GETs wait for open() (or
// the request's end), counting them and the ones aborted by the client.
type gatedRegistry struct {
	*httptest.Server
	gate             chan struct{}
	gets, aborted    atomic.Int64
	started          chan struct{}
	closeGate, armed sync.Once
}

func newGatedRegistry(t *testing.T) *gatedRegistry {
	g := &gatedRegistry{gate: make(chan struct{}), started: make(chan struct{}, 16)}
	close(g.gate) // open until arm
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:") {
			g.gets.Add(1)
			g.started <- struct{}{}
			select {
			case <-g.gate:
			case <-r.Context().Done():
				g.aborted.Add(1)
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(g.Close)
	return g
}

func (g *gatedRegistry) arm() {
	g.gate = make(chan struct{})
	for len(g.started) > 0 {
		<-g.started
	}
}

func pushBlob(t *testing.T, reg *httptest.Server, b []byte) (name.Repository, v1.Hash) {
	t.Helper()
	repo, err := name.NewRepository(strings.TrimPrefix(reg.URL, "http://")+"/os/blobs", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	l := static.NewLayer(b, types.MediaType("application/vnd.ironcore.image.disk"))
	if err := remote.WriteLayer(repo, l); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Digest()
	return repo, d
}

// TestSharedFetchSurvivesDisconnect: the first client of a blob leaves
// while the fetch runs; a second client waiting on the same fetch still
// gets the blob, from one registry request.
func TestSharedFetchSurvivesDisconnect(t *testing.T) {
	blob := bytes.Repeat([]byte("disk"), 1<<16)
	for _, via := range []string{"http", "publish"} {
		t.Run(via, func(t *testing.T) {
			reg := newGatedRegistry(t)
			repo, d := pushBlob(t, reg.Server, blob)
			cache := privateDir(t)
			srv, logs := loggedServer(t, RegistrySource{Repo: repo}, cache)
			ts := httptest.NewServer(srv)
			defer ts.Close()
			url := ts.URL + "/blobs/" + d.String() + "/disk.raw"
			if via == "http" {
				// Published, then gone from the cache: the next GET fetches.
				if err := publish(t, srv, d, len(blob), "disk.raw"); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(filepath.Join(cache, "sha256", d.Hex)); err != nil {
					t.Fatal(err)
				}
			}
			reg.arm()
			gets := reg.gets.Load()
			first, leave := context.WithCancel(t.Context())
			firstDone := make(chan error, 1)
			start := func(ctx context.Context) func() ([]byte, int, error) {
				if via == "publish" {
					return func() ([]byte, int, error) {
						return nil, 0, srv.Publish(ctx, []boot.PublishedArtifact{{Artifact: boot.Artifact{Digest: d.String(), Size: int64(len(blob)), Name: "disk.raw"}}}, nil)
					}
				}
				return func() ([]byte, int, error) {
					req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						return nil, 0, err
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					return b, resp.StatusCode, err
				}
			}
			go func() { _, _, err := start(first)(); firstDone <- err }()
			<-reg.started // the fetch is in flight
			type result struct {
				b    []byte
				code int
				err  error
			}
			second := make(chan result, 1)
			go func() { b, code, err := start(t.Context())(); second <- result{b, code, err} }()
			time.Sleep(100 * time.Millisecond) // the second waits on the same fetch
			leave()
			if err := <-firstDone; !errors.Is(err, context.Canceled) {
				t.Fatalf("first client: %v, want context.Canceled", err)
			}
			time.Sleep(200 * time.Millisecond) // the server sees the disconnect
			close(reg.gate)
			r := <-second
			if r.err != nil || (via == "http" && (r.code != 200 || !bytes.Equal(r.b, blob))) {
				t.Fatalf("second client: %v, status %d, %d bytes; log %s", r.err, r.code, len(r.b), logs.String())
			}
			if n := reg.gets.Load() - gets; n != 1 {
				t.Errorf("%d registry blob GETs, want one shared fetch", n)
			}
			if reg.aborted.Load() != 0 {
				t.Errorf("the registry fetch was aborted with the first client")
			}
		})
	}
}

// TestFetchFailureLogged: a failed fetch says why, in the log and to the
// client, with a status that tells the source's fault from the server's.
func TestFetchFailureLogged(t *testing.T) {
	tests := []struct {
		name     string
		break_   func(src string) error
		wantCode int
		want     string
	}{
		{"source lies", func(src string) error { return os.WriteFile(src, []byte("initrd bytez"), 0o600) }, http.StatusBadGateway, "digest mismatch"},
		{"source grew", func(src string) error { return os.WriteFile(src, []byte("initrd bytes+"), 0o600) }, http.StatusBadGateway, "more than the 12 bytes"},
		{"source gone", os.Remove, http.StatusBadGateway, "no such file or directory"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src, sum := writeFile(t, t.TempDir(), "initrd.img", []byte("initrd bytes"))
			cache := privateDir(t)
			srv, logs := loggedServer(t, FileSource{sum: src}, cache)
			if err := publish(t, srv, sum, len("initrd bytes"), "initrd.img"); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(cache, "sha256", sum.Hex)); err != nil {
				t.Fatal(err)
			}
			if err := tc.break_(src); err != nil {
				t.Fatal(err)
			}
			rec := get(t, srv, "/blobs/"+sum.String()+"/initrd.img")
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.want) || !strings.Contains(rec.Body.String(), sum.String()) {
				t.Errorf("response %d %q, want %d naming %s and %q", rec.Code, rec.Body.String(), tc.wantCode, sum, tc.want)
			}
			if l := logs.String(); !strings.Contains(l, "blob "+sum.String()+" unavailable") || !strings.Contains(l, tc.want) {
				t.Errorf("log %q, want the blob and %q", l, tc.want)
			}
		})
	}
}

func TestServerTimeoutsSet(t *testing.T) {
	srv, err := NewServer(FileSource{}, privateDir(t), "http://x")
	if err != nil {
		t.Fatal(err)
	}
	h := srv.httpServer()
	if h.ReadHeaderTimeout != 10*time.Second || h.ReadTimeout != 30*time.Second || h.WriteTimeout != 2*time.Minute ||
		h.IdleTimeout != 2*time.Minute || h.MaxHeaderBytes != 64<<10 {
		t.Errorf("timeouts: header %s read %s write %s idle %s max header %d", h.ReadHeaderTimeout, h.ReadTimeout, h.WriteTimeout, h.IdleTimeout, h.MaxHeaderBytes)
	}
}

// TestSlowClients: with short timeouts, a slowloris client and a client
// that stops reading are cut, while a slow but steady download runs far
// past WriteTimeout and writeStall and completes.
func TestSlowClients(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	src, sum := writeFile(t, t.TempDir(), "disk.raw", data)
	srv, err := NewServer(FileSource{sum: src}, privateDir(t), "http://x")
	if err != nil {
		t.Fatal(err)
	}
	srv.timeouts = timeouts{readHeader: 300 * time.Millisecond, read: time.Second, write: time.Second, idle: time.Second,
		writeStall: 500 * time.Millisecond, writeChunk: 64 << 10}
	if err := publish(t, srv, sum, len(data), "disk.raw"); err != nil {
		t.Fatal(err)
	}
	addr := make(chan net.Addr, 1)
	go func() { _ = srv.ListenAndServe(t.Context(), "127.0.0.1:0", func(a net.Addr) { addr <- a }) }()
	a := (<-addr).String()
	dial := func(t *testing.T) *net.TCPConn {
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		tc := c.(*net.TCPConn)
		_ = tc.SetReadBuffer(64 << 10)
		return tc
	}
	request := func(t *testing.T, c net.Conn) *http.Response {
		if _, err := fmt.Fprintf(c, "GET /blobs/%s/disk.raw HTTP/1.1\r\nHost: x\r\n\r\n", sum); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%v %v", resp, err)
		}
		return resp
	}

	t.Run("slowloris", func(t *testing.T) {
		c := dial(t)
		start := time.Now()
		if _, err := io.WriteString(c, "GET /blobs/"+sum.String()+"/disk.raw HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := io.ReadAll(c)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatalf("connection with an unfinished header still open after 5s")
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("cut after %s, want about 300ms", took)
		}
	})
	t.Run("stalled reader", func(t *testing.T) {
		c := dial(t)
		resp := request(t, c)
		if _, err := io.CopyN(io.Discard, resp.Body, 1<<20); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // 4x writeStall without reading
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _ := io.Copy(io.Discard, resp.Body)
		if n+1<<20 >= int64(len(data)) {
			t.Errorf("a client that stopped reading for 4x writeStall got all %d bytes", n+1<<20)
		}
	})
	t.Run("slow steady reader", func(t *testing.T) {
		c := dial(t)
		resp := request(t, c)
		start := time.Now()
		var n int64
		buf := make([]byte, 512<<10)
		for {
			m, err := io.ReadFull(resp.Body, buf)
			n += int64(m)
			if err != nil {
				break
			}
			time.Sleep(60 * time.Millisecond) // ~8 MiB/s
		}
		if n != int64(len(data)) {
			t.Fatalf("got %d of %d bytes after %s", n, len(data), time.Since(start))
		}
		if took := time.Since(start); took < 2*time.Second {
			t.Logf("download took only %s: socket buffers absorbed it", took)
		}
	})
}

// FuzzServePath: request paths are outside input. Whatever the path, the
// server answers without panicking and serves bytes only for a published
// digest/name pair or script.
func FuzzServePath(f *testing.F) {
	blob := []byte("uki bytes")
	src, sum := writeFile(f, f.TempDir(), "uki.efi", blob)
	srv, err := NewServer(FileSource{sum: src}, privateDir(f), "http://x")
	if err != nil {
		f.Fatal(err)
	}
	srv.Logf = func(string, ...any) {}
	if err := srv.Publish(f.Context(), []boot.PublishedArtifact{{Artifact: boot.Artifact{Digest: sum.String(), Size: int64(len(blob)), Name: "uki.efi"}}},
		[]boot.Script{{Name: "a.ipxe", Content: "#!ipxe\n"}}); err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{"/blobs/" + sum.String() + "/uki.efi", "/ipxe/a.ipxe", "/blobs/sha256:../../etc/passwd/x",
		"/blobs/" + sum.String() + "/../uki.efi", "/blobs//", "/ipxe/", "/%2e%2e/", "/blobs/sha512:00/x",
		strings.TrimPrefix(srv.BootURL("m"), "http://x") + "/blobs/" + sum.String() + "/uki.efi", "/boot/zz/ipxe/a.ipxe", "/boot//blobs/"} {
		f.Add(seed, "")
		f.Add(seed, "bytes=0-3")
	}
	f.Fuzz(func(t *testing.T, p, rng string) {
		req, err := http.NewRequest("GET", "http://x/", nil)
		if err != nil {
			t.Skip()
		}
		req.URL.Path = p
		if rng != "" {
			req.Header["Range"] = []string{rng}
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		if rec.Code/100 != 2 {
			return
		}
		rest := strings.TrimPrefix(p, "/") // the server reads the path without its leading slash
		if parts := strings.SplitN(rest, "/", 3); len(parts) == 3 && parts[0] == bootPrefix && validBootToken(parts[1]) {
			rest = parts[2] // a boot's URLs are served like any
		}
		switch rest {
		case "blobs/" + sum.String() + "/uki.efi", "ipxe/a.ipxe":
		default:
			t.Fatalf("served %d for unpublished path %q", rec.Code, p)
		}
	})
}
