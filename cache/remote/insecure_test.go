package remote_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// privateRegistry is a private-range address no test machine answers on:
// the recording proxy below stands in for the network path to it.
const privateRegistry = "10.213.7.9:5000"

// recordingProxy is an HTTP proxy that records each request it is asked
// to make: "CONNECT host" for HTTPS (refused: nothing answers TLS there)
// and "GET http://host/..." for plain HTTP, which it forwards to the real
// docker-registry at target.
func recordingProxy(t *testing.T, target string) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	fwd := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Method == http.MethodConnect {
			seen = append(seen, "CONNECT "+r.Host)
		} else {
			seen = append(seen, r.Method+" "+r.URL.String())
		}
		mu.Unlock()
		if r.Method == http.MethodConnect {
			http.Error(w, "no TLS here", http.StatusBadGateway)
			return
		}
		fwd.ServeHTTP(w, r)
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return "http://" + l.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestPrivateRangeNotPlainHTTP: a registry at a private-range address is
// spoken to over HTTPS only; plain HTTP needs Insecure (the commands'
// --insecure). The repository is opened in a child process whose HTTP
// proxy (the environment's, as the cache's transport reads it) records
// each request: no plain GET without the flag, and with it the entry
// lookup reaches the real registry behind the proxy.
func TestPrivateRangeNotPlainHTTP(t *testing.T) {
	reg := testutil.NewRegistry(t)
	for _, tc := range []struct {
		name     string
		insecure bool
	}{{"default", false}, {"insecure", true}} {
		t.Run(tc.name, func(t *testing.T) {
			proxy, seen := recordingProxy(t, reg)
			cmd := exec.Command(os.Args[0], "-test.run=^TestPrivateRangeChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "NO_PROXY=", "no_proxy=",
				"OSB_TEST_PRIVATE_CHILD="+fmt.Sprint(tc.insecure))
			out, err := cmd.CombinedOutput()
			var plain []string
			for _, s := range seen() {
				if !strings.HasPrefix(s, "CONNECT ") {
					plain = append(plain, s)
				}
			}
			t.Logf("proxy saw %q", seen())
			if !tc.insecure {
				if len(plain) > 0 {
					t.Errorf("without --insecure the cache spoke plain HTTP to %s: %q", privateRegistry, plain)
				}
				if err == nil || !strings.Contains(string(out), "lookup failed") {
					t.Errorf("without --insecure the lookup did not fail: %v\n%s", err, out)
				}
				return
			}
			if err != nil || len(plain) == 0 {
				t.Errorf("with --insecure: %v, plain requests %q\n%s", err, plain, out)
			}
		})
	}
}

// TestPrivateRangeChild is TestPrivateRangeNotPlainHTTP's child: it looks
// an entry up at privateRegistry through the environment's proxy.
func TestPrivateRangeChild(t *testing.T) {
	mode := os.Getenv("OSB_TEST_PRIVATE_CHILD")
	if mode == "" {
		t.Skip("run by TestPrivateRangeNotPlainHTTP")
	}
	var opts []remote.Option
	if mode == "true" {
		opts = append(opts, remote.Insecure())
	}
	repo, err := remote.Open(privateRegistry+"/osb/cache", opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := repo.Has(context.Background(), strings.Repeat("0", 64)); err != nil {
		w := bufio.NewWriter(os.Stdout)
		fmt.Fprintf(w, "lookup failed: %v\n", err)
		w.Flush()
		t.Fatal(err)
	}
}
