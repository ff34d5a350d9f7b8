package pid1

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

type bufSink struct{ bytes.Buffer }

func (s *bufSink) Begin(int64) (io.Writer, error) { s.Reset(); return &s.Buffer, nil }

// TestFetchIPv6Literal: the init's fetch takes URLs with IPv6 literals
// (osb.root=http://[fd00::1]:8080/...), here the host's [::1].
func TestFetchIPv6Literal(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	body := bytes.Repeat([]byte("root image "), 1000)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	ts.Listener = ln
	ts.Start()
	defer ts.Close()
	sum := sha256.Sum256(body)
	var sink bufSink
	url := "http://" + ln.Addr().String() + "/root.squashfs"
	if url[:9] != "http://[:" {
		t.Fatalf("URL %s has no IPv6 literal", url)
	}
	if err := checkURL(url); err != nil {
		t.Fatal(err)
	}
	n, err := (&initProcess{}).fetchVerified(url, hex.EncodeToString(sum[:]), &sink)
	if err != nil || n != int64(len(body)) || !bytes.Equal(sink.Bytes(), body) {
		t.Fatalf("fetch %s: %d bytes, %v", url, n, err)
	}
}
