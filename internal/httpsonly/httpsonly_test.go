package httpsonly

import "testing"

// TestIsLoopback: the hosts plain HTTP is allowed to without Insecure.
// go-containerregistry also picks plain HTTP for private ranges and
// *.local; those are not loopback.
func TestIsLoopback(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "127.1.2.3": true, "::1": true, "localhost": true, "LOCALHOST.": true, "reg.localhost": true,
		"10.0.0.1": false, "172.16.5.4": false, "192.168.1.1": false, "fd00::1": false, "registry.local": false,
		"ghcr.io": false, "localhost.example.com": false, "": false,
	} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}
