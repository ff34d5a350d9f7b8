package netns

import (
	"context"
	"net"
	"testing"
)

// TestCancelledExchange: an exchange that waits for its context on c0
// passes.
func TestCancelledExchange(t *testing.T) {
	CancelledExchange(t, func(ctx context.Context, ifi *net.Interface) error {
		if ifi.Name != "c0" || ifi.Flags&net.FlagUp == 0 {
			t.Errorf("link %s (%v), want c0 up", ifi.Name, ifi.Flags)
		}
		<-ctx.Done()
		return ctx.Err()
	})
}
