package artifacts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/boot"
)

func writeFile(t testing.TB, dir, name string, b []byte) (string, v1.Hash) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := HashFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return p, h
}

func TestServe(t *testing.T) {
	dir := t.TempDir()
	uki := bytes.Repeat([]byte("MZuki"), 2000)
	iso := bytes.Repeat([]byte("CD001"), 3000)
	raw := []byte("kernel bytes")
	ukiPath, ukiSum := writeFile(t, dir, "uki.efi", uki)
	isoPath, isoSum := writeFile(t, dir, "image.iso", iso)
	rawPath, rawSum := writeFile(t, dir, "vmlinuz", raw)
	ts := httptest.NewServer(nil)
	defer ts.Close()
	srv, err := NewServer(FileSource{ukiSum: ukiPath, isoSum: isoPath, rawSum: rawPath}, privateDir(t), ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv
	arts := []boot.PublishedArtifact{
		{Artifact: boot.Artifact{Digest: ukiSum.String(), Size: int64(len(uki)), Name: "uki.efi"}},
		{Artifact: boot.Artifact{Digest: isoSum.String(), Size: int64(len(iso)), Name: "image.iso"}},
		{Artifact: boot.Artifact{Digest: rawSum.String(), Size: int64(len(raw)), Name: "vmlinuz"}},
	}
	script := boot.Script{Name: "abc.ipxe", Content: "#!ipxe\nboot\n"}
	if err := srv.Publish(t.Context(), arts, []boot.Script{script}); err != nil {
		t.Fatal(err)
	}
	u := func(h v1.Hash, name string) string { return fmt.Sprintf("/blobs/%s/%s", h, name) }
	tests := []struct {
		name, method, path, rng string
		wantCode                int
		wantType                string
		wantLen                 string
		wantBody                []byte
	}{
		{"efi GET", "GET", u(ukiSum, "uki.efi"), "", 200, "application/efi", fmt.Sprint(len(uki)), uki},
		{"efi HEAD", "HEAD", u(ukiSum, "uki.efi"), "", 200, "application/efi", fmt.Sprint(len(uki)), nil},
		{"iso range", "GET", u(isoSum, "image.iso"), "bytes=5-9", 206, "application/x-iso9660-image", "5", iso[5:10]},
		{"iso tail range", "GET", u(isoSum, "image.iso"), "bytes=-4", 206, "application/x-iso9660-image", "4", iso[len(iso)-4:]},
		{"octet stream", "GET", u(rawSum, "vmlinuz"), "", 200, "application/octet-stream", fmt.Sprint(len(raw)), raw},
		{"bad range", "GET", u(rawSum, "vmlinuz"), "bytes=100-200", 416, "", "", nil},
		{"unpublished name", "GET", u(rawSum, "other"), "", 404, "", "", nil},
		{"unpublished digest", "GET", u(v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}, "x"), "", 404, "", "", nil},
		{"bad digest", "GET", "/blobs/nope/x", "", 400, "", "", nil},
		{"ipxe script", "GET", "/ipxe/abc.ipxe", "", 200, "text/plain; charset=utf-8", "12", []byte(script.Content)},
		{"unknown script", "GET", "/ipxe/zzz.ipxe", "", 404, "", "", nil},
		{"post refused", "POST", u(rawSum, "vmlinuz"), "", 405, "", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, ts.URL+tc.path, nil)
			if tc.rng != "" {
				req.Header.Set("Range", tc.rng)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tc.wantCode, body)
			}
			if tc.wantType != "" && resp.Header.Get("Content-Type") != tc.wantType {
				t.Errorf("Content-Type %q, want %q", resp.Header.Get("Content-Type"), tc.wantType)
			}
			if tc.wantLen != "" && resp.Header.Get("Content-Length") != tc.wantLen {
				t.Errorf("Content-Length %q, want %q", resp.Header.Get("Content-Length"), tc.wantLen)
			}
			if tc.wantBody != nil && !bytes.Equal(body, tc.wantBody) {
				t.Errorf("body %d bytes differs", len(body))
			}
			if tc.method == "HEAD" && len(body) != 0 {
				t.Errorf("HEAD returned a body")
			}
		})
	}
}

func TestDigestVerification(t *testing.T) {
	dir := t.TempDir()
	p, sum := writeFile(t, dir, "uki.efi", []byte("the real uki"))
	// The file changes after it was hashed: the source now lies.
	if err := os.WriteFile(p, []byte("tampered uki"), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := privateDir(t)
	srv, err := NewServer(FileSource{sum: p}, cache, "http://x")
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Publish(t.Context(), []boot.PublishedArtifact{{Artifact: boot.Artifact{Digest: sum.String(), Size: int64(len("the real uki")), Name: "uki.efi"}}}, nil)
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("err = %v, want ErrDigestMismatch", err)
	}
	if _, err := os.Stat(filepath.Join(cache, "sha256", sum.Hex)); !os.IsNotExist(err) {
		t.Errorf("corrupt blob was cached: %v", err)
	}
	// Nothing half-written remains either.
	ents, _ := os.ReadDir(filepath.Join(cache, "sha256"))
	if len(ents) != 0 {
		t.Errorf("cache holds %d entries", len(ents))
	}
}

func TestLayoutSource(t *testing.T) {
	b := []byte("iso from an OCI layout")
	l := static.NewLayer(b, types.MediaType("application/vnd.ironcore.image.iso"))
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	lp, err := layout.Write(t.TempDir(), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Digest()
	srv, err := NewServer(LayoutSource{Path: lp}, privateDir(t), "http://x")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish(context.Background(), []boot.PublishedArtifact{{Artifact: boot.Artifact{Digest: d.String(), Size: int64(len(b)), Name: "image.iso"}}}, nil); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/blobs/"+d.String()+"/image.iso", nil))
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), b) {
		t.Fatalf("GET: %d %q", rec.Code, rec.Body.String())
	}
}

func TestContentType(t *testing.T) {
	for name, want := range map[string]string{
		"uki.efi": "application/efi", "BOOTX64.EFI": "application/efi", "image.iso": "application/x-iso9660-image",
		"vmlinuz": "application/octet-stream", "initrd.img": "application/octet-stream", "x.ipxe": "text/plain; charset=utf-8",
	} {
		if got := ContentType(name); got != want {
			t.Errorf("ContentType(%s) = %s, want %s", name, got, want)
		}
	}
}

// BenchmarkThroughput compares serving a 64 MiB blob over loopback HTTP
// with a plain file copy; the ratio metric is HTTP time / copy time.
func BenchmarkThroughput(b *testing.B) {
	dir := b.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 4<<20) // 64 MiB
	p, sum := writeFile(b, dir, "disk.raw", data)
	srv, err := NewServer(FileSource{sum: p}, privateDir(b), "http://x")
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Publish(b.Context(), []boot.PublishedArtifact{{Artifact: boot.Artifact{Digest: sum.String(), Size: int64(len(data)), Name: "disk.raw"}}}, nil); err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	url := ts.URL + "/blobs/" + sum.String() + "/disk.raw"
	var httpNS, copyNS int64
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		start := time.Now().UnixNano()
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != int64(len(data)) {
			b.Fatalf("got %d bytes", n)
		}
		httpNS += time.Now().UnixNano() - start
		start = time.Now().UnixNano()
		src, _ := os.Open(p)
		dst, _ := os.Create(filepath.Join(dir, "copy"))
		_, _ = io.Copy(dst, src)
		src.Close()
		dst.Close()
		copyNS += time.Now().UnixNano() - start
	}
	b.ReportMetric(float64(httpNS)/float64(copyNS), "http/copy")
	b.ReportMetric(float64(len(data))*float64(b.N)/(float64(httpNS)/1e9)/(1<<20), "http-MiB/s")
	b.ReportMetric(float64(len(data))*float64(b.N)/(float64(copyNS)/1e9)/(1<<20), "copy-MiB/s")
}

// privateDir is a cache directory NewServer accepts: t.TempDir() is 0755,
// so the cache is a directory NewServer creates (0700) inside it.
func privateDir(t testing.TB) string {
	return filepath.Join(t.TempDir(), "cache")
}
