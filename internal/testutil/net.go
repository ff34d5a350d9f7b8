package testutil

import (
	"net"
	"testing"
)

// FreeAddr returns a loopback address ("127.0.0.1:port") that nothing
// listens on: a port the kernel just handed out and that was closed
// again, for a server the test starts later or for one that is down.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
