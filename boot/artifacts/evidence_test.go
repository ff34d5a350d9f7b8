package artifacts

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/boot"
)

// evidencePlan publishes a UKI the way a plan made with base does.
func evidencePlan(t *testing.T, srv *Server, base string, blob []byte, d string) *boot.Plan {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	a := boot.Artifact{Digest: d, Size: int64(len(blob)), Name: "uki.efi"}
	pa := boot.PublishedArtifact{Artifact: a, URL: boot.ArtifactURL(u, a.Digest, a.Name)}
	if err := srv.Publish(t.Context(), []boot.PublishedArtifact{pa}, nil); err != nil {
		t.Fatal(err)
	}
	return &boot.Plan{Steps: []boot.Step{{Kind: boot.StepPublishArtifacts, Artifacts: []boot.PublishedArtifact{pa}}}}
}

// getFrom GETs path from a client at addr.
func getFrom(t *testing.T, srv *Server, path, addr string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.RemoteAddr = addr
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec.Code
}

// TestBootEvidenceBound: any client's GET of the boot file's URL counted
// as "the machine booted". The plan's URLs now carry a per-boot token
// (Server.BootURL, an HMAC of the boot's id under a key kept in the
// private cache directory), so only a client that got the URL from this
// boot's plan (override, iPXE script, media) counts: a GET without the
// token or with another boot's token does not, and where the machine's
// address is known only a GET from it counts. A plan without a token
// gets no unbound evidence: FetchEvidence refuses it.
func TestBootEvidenceBound(t *testing.T) {
	blob := []byte("the uki of this boot")
	src, sum := writeFile(t, t.TempDir(), "uki.efi", blob)
	const machine = "192.0.2.10:40000"
	tests := []struct {
		name    string
		from    []netip.Addr
		get     func(srv *Server, plan *boot.Plan) string // path the client GETs
		addr    string
		counts  bool
		refused bool // FetchEvidence fails at once
	}{
		{"this boot's URL", nil, func(_ *Server, p *boot.Plan) string { return pathOf(p) }, machine, true, false},
		{"without the token", nil, func(_ *Server, p *boot.Plan) string {
			return "/blobs/" + p.Steps[0].Artifacts[0].Digest + "/uki.efi"
		}, machine, false, false},
		{"another boot's token", nil, func(s *Server, p *boot.Plan) string {
			other, _ := url.Parse(s.BootURL("bmc-b"))
			return other.Path + "/blobs/" + p.Steps[0].Artifacts[0].Digest + "/uki.efi"
		}, machine, false, false},
		{"a made-up token", nil, func(_ *Server, p *boot.Plan) string {
			return "/b/" + strings.Repeat("0", bootTokenLen) + "/blobs/" + p.Steps[0].Artifacts[0].Digest + "/uki.efi"
		}, machine, false, false},
		{"from the machine's address", []netip.Addr{netip.MustParseAddr("192.0.2.10")}, func(_ *Server, p *boot.Plan) string { return pathOf(p) }, machine, true, false},
		{"from another address", []netip.Addr{netip.MustParseAddr("192.0.2.10")}, func(_ *Server, p *boot.Plan) string { return pathOf(p) }, "192.0.2.66:40000", false, false},
		{"plan without a token", nil, nil, machine, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := NewServer(FileSource{sum: src}, privateDir(t), "http://art.example:8080/prefix")
			if err != nil {
				t.Fatal(err)
			}
			base := srv.BootURL("bmc-a")
			if tc.refused {
				base = srv.AdvertiseURL()
			}
			p := evidencePlan(t, srv, base, blob, sum.String())
			since := time.Now() // the attempt's power action
			if tc.get != nil {
				if code := getFrom(t, srv, tc.get(srv, p), tc.addr); code != http.StatusOK && code != http.StatusNotFound {
					t.Fatalf("GET: %d", code)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			err = srv.FetchEvidence(tc.from...)(ctx, p, since)
			switch {
			case tc.refused:
				if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "token") {
					t.Errorf("evidence for a plan without a token: %v, want a refusal naming the token", err)
				}
			case tc.counts && err != nil:
				t.Errorf("evidence: %v, want the GET to count", err)
			case !tc.counts && err == nil:
				t.Errorf("evidence: the GET counted")
			}
		})
	}
}

// TestFetchEvidenceSince: a boot token is the same for every attempt of
// one machine and image, so a GET of the boot file counts only for an
// attempt whose power action came before the GET arrived: the earlier
// attempt's fetch, or one by anyone who saw the URL, does not count for a
// later attempt; the machine's next GET (same address) does.
func TestFetchEvidenceSince(t *testing.T) {
	blob := []byte("the uki of this boot")
	src, sum := writeFile(t, t.TempDir(), "uki.efi", blob)
	srv, err := NewServer(FileSource{sum: src}, privateDir(t), "http://art.example:8080/prefix")
	if err != nil {
		t.Fatal(err)
	}
	p := evidencePlan(t, srv, srv.BootURL("bmc-a"), blob, sum.String())
	const machine = "192.0.2.10:40000"
	evidence := func(since time.Time) error {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		return srv.FetchEvidence()(ctx, p, since)
	}
	first := time.Now()
	if code := getFrom(t, srv, pathOf(p), machine); code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	if err := evidence(first); err != nil {
		t.Errorf("first attempt: %v, want its GET to count", err)
	}
	second := time.Now()
	if err := evidence(second); err == nil {
		t.Error("second attempt: the first attempt's GET counted")
	}
	if code := getFrom(t, srv, pathOf(p), machine); code != http.StatusOK {
		t.Fatalf("GET: %d", code)
	}
	if err := evidence(second); err != nil {
		t.Errorf("second attempt: %v, want the machine's new GET to count", err)
	}
	if err := evidence(time.Now()); err == nil {
		t.Error("third attempt: a GET before it counted")
	}
}

// pathOf is the path the artifact server sees for the plan's boot file
// (the advertised /prefix is stripped by a proxy).
func pathOf(p *boot.Plan) string {
	u, _ := url.Parse(p.Steps[0].Artifacts[0].URL)
	return strings.TrimPrefix(u.Path, "/prefix")
}

// TestBootURLStable: the same boot id gets the same URL from a restarted
// server on the same cache directory (a resumed plan keeps its digest and
// the override it set still works), another id or another cache
// directory's key another one.
func TestBootURLStable(t *testing.T) {
	dir := privateDir(t)
	a, err := NewServer(FileSource{}, dir, "http://x")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewServer(FileSource{}, dir, "http://x")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewServer(FileSource{}, privateDir(t), "http://x")
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := BootURL("http://x", dir, "bmc-a")
	if err != nil {
		t.Fatal(err)
	}
	if a.BootURL("bmc-a") != b.BootURL("bmc-a") || pkg != a.BootURL("bmc-a") {
		t.Errorf("restart changed the URL: %s, %s, %s", a.BootURL("bmc-a"), b.BootURL("bmc-a"), pkg)
	}
	if a.BootURL("bmc-a") == a.BootURL("bmc-b") {
		t.Errorf("two boots share %s", a.BootURL("bmc-a"))
	}
	if a.BootURL("bmc-a") == c.BootURL("bmc-a") {
		t.Errorf("two keys give one token")
	}
	if !strings.HasPrefix(a.BootURL("bmc-a"), "http://x/b/") {
		t.Errorf("BootURL = %s", a.BootURL("bmc-a"))
	}
}

// TestBootURLFitsBootFile: a boot's UKI URL on the address QEMU's slirp
// gives its host fits DHCP's 128-byte boot file field (slirp asserts on a
// longer one; BOOTP firmware truncates it).
func TestBootURLFitsBootFile(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	base, err := BootURL("http://10.0.2.2:65535", dir, "https://bmc.example/redfish/v1 registry.example/os-images/test:e2e")
	if err != nil {
		t.Fatal(err)
	}
	u := base + "/blobs/sha256:" + strings.Repeat("a", 64) + "/uki.efi"
	if len(u) >= 128 {
		t.Errorf("%s: %d bytes, want under 128", u, len(u))
	}
}
