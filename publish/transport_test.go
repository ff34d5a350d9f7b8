package publish

import (
	"errors"
	"net/http"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/httpsonly"
)

// roundTripFunc records what reaches the network.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestPlainHTTPNeedsInsecure: go-containerregistry pings a private-range
// registry over plain HTTP by itself; push, pull, inspect and index send
// nothing there in clear without --insecure (loopback stays allowed, as
// for the cache).
func TestPlainHTTPNeedsInsecure(t *testing.T) {
	for _, tc := range []struct {
		url      string
		insecure bool
		sent     bool
	}{
		{"http://10.1.2.3:5000/v2/", false, false},
		{"http://192.168.1.1/v2/", false, false},
		{"http://registry.local/v2/", false, false},
		{"http://10.1.2.3:5000/v2/", true, true},
		{"http://127.0.0.1:5000/v2/", false, true},
		{"https://10.1.2.3:5000/v2/", false, true},
	} {
		sent := false
		o := Options{Insecure: tc.insecure, Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
			sent = true
			return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
		})}
		req, err := http.NewRequest(http.MethodGet, tc.url, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = o.transport().RoundTrip(req)
		if sent != tc.sent {
			t.Errorf("%s (insecure %v): sent %v, want %v", tc.url, tc.insecure, sent, tc.sent)
		}
		if !tc.sent && !errors.Is(err, httpsonly.ErrPlainHTTP) {
			t.Errorf("%s: %v, want ErrPlainHTTP", tc.url, err)
		}
	}
}
