// Package httpsonly is the one rule for plain HTTP to registries: only to
// loopback, unless the user passed --insecure (the cache, push, pull,
// inspect, index and serverboot alike).
package httpsonly

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// ErrPlainHTTP is a plain-HTTP request to a registry that is not on
// loopback, made without --insecure. go-containerregistry falls back to
// plain HTTP for private-range (10/8, 172.16/12, 192.168/16) and *.local
// registries by itself; credentials, images and cache entries must not
// cross a network in clear unless the user said so.
var ErrPlainHTTP = errors.New("plain HTTP to a registry not on loopback needs --insecure")

// httpsOnly refuses plain-HTTP requests to hosts not on loopback, before
// anything is dialed.
type httpsOnly struct{ next http.RoundTripper }

// Transport is next refusing plain HTTP to any host not on loopback.
func Transport(next http.RoundTripper) http.RoundTripper { return httpsOnly{next} }

func (t httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !IsLoopback(req.URL.Hostname()) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Redacted(), ErrPlainHTTP)
	}
	return t.next.RoundTrip(req)
}

// IsLoopback: localhost (and names under it, RFC 6761) or a loopback IP.
func IsLoopback(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
