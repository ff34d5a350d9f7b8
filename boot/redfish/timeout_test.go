package redfish

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/redfishemu"
)

// stallingBMC serves the emulator until stall is set; from then on it
// accepts requests and never answers them (a hung BMC web server).
func stallingBMC(t *testing.T, opts redfishemu.Options) (*httptest.Server, *redfishemu.Emulator, *atomic.Bool) {
	t.Helper()
	emu := redfishemu.New(opts)
	var stall atomic.Bool
	release := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stall.Load() {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		emu.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(func() { close(release) }) // runs first: Close waits for handlers
	return ts, emu, &stall
}

// within runs fn and fails the test if it does not return within limit.
func within(t *testing.T, limit time.Duration, fn func() error) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err, time.Since(start)
	case <-time.After(limit):
		t.Fatalf("call still running after %s", limit)
		return nil, 0
	}
}

// TestTaskMonitorBoundedByDeadline: a task monitor that answers 202
// forever ends at the call's deadline (or the client's TaskTimeout), with
// an error naming the monitor, and the action is not sent again.
func TestTaskMonitorBoundedByDeadline(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ctxTimeout  time.Duration
		taskTimeout time.Duration
	}{
		{"context deadline", 400 * time.Millisecond, 0},
		{"task timeout", 0, 400 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emu := redfishemu.New(redfishemu.Options{AsyncReset: true, TaskPolls: 1 << 30})
			ts := httptest.NewServer(emu)
			defer ts.Close()
			c, err := Connect(t.Context(), Config{Endpoint: ts.URL, Credentials: Credentials{Username: "admin", Password: "password"},
				TaskPoll: 10 * time.Millisecond, TaskTimeout: tc.taskTimeout, Retry: Retry{Base: time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := t.Context()
			if tc.ctxTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxTimeout)
				defer cancel()
			}
			err, took := within(t, 10*time.Second, func() error { return c.Reset(ctx, "On") })
			if !errors.Is(err, boot.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) ||
				!strings.Contains(err.Error(), "task monitor /redfish/v1/TaskService/TaskMonitors/") || !strings.Contains(err.Error(), "still running (TaskState Running)") {
				t.Fatalf("err = %v, want ErrTimeout naming the task monitor", err)
			}
			if took > 2*time.Second {
				t.Errorf("took %s for a 400ms bound", took)
			}
			if b := emu.Boots(); len(b) != 1 {
				t.Errorf("reset sent %d times, want once: %+v", len(b), b)
			}
		})
	}
}

// TestCallsBoundedByDeadline: against a BMC that stops answering, every
// call ends at its context's deadline with boot.ErrTimeout, not after the
// HTTP client's per-request timeout times the retries.
func TestCallsBoundedByDeadline(t *testing.T) {
	ts, _, stall := stallingBMC(t, redfishemu.Options{})
	c, err := Connect(t.Context(), Config{Endpoint: ts.URL, Credentials: Credentials{Username: "admin", Password: "password"}})
	if err != nil {
		t.Fatal(err)
	}
	stall.Store(true)
	calls := map[string]func(context.Context) error{
		"eject":         c.EjectMedia,
		"power state":   func(ctx context.Context) error { _, err := c.PowerState(ctx); return err },
		"boot override": func(ctx context.Context) error { _, err := c.BootOverride(ctx); return err },
		"media":         func(ctx context.Context) error { _, err := c.Media(ctx); return err },
		"set override": func(ctx context.Context) error {
			return c.SetBootOverride(ctx, boot.Override{Target: boot.TargetHdd, Enabled: boot.EnabledOnce})
		},
		"reset": func(ctx context.Context) error { return c.Reset(ctx, "On") },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			err, took := within(t, 10*time.Second, func() error { return call(ctx) })
			if !errors.Is(err, boot.ErrTimeout) || !strings.Contains(err.Error(), "deadline") {
				t.Fatalf("err = %v, want ErrTimeout at the deadline", err)
			}
			if took > 2*time.Second {
				t.Errorf("took %s for a 300ms deadline", took)
			}
		})
	}
	_, took := within(t, 15*time.Second, c.Close)
	if took > logoutTimeout+time.Second {
		t.Errorf("Close took %s", took)
	}
}

// TestConnectBoundedByDeadline: a BMC that never answers at all.
func TestConnectBoundedByDeadline(t *testing.T) {
	ts, _, stall := stallingBMC(t, redfishemu.Options{})
	stall.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err, took := within(t, 10*time.Second, func() error {
		_, err := Connect(ctx, Config{Endpoint: ts.URL, Credentials: Credentials{Username: "admin", Password: "password"}})
		return err
	})
	if !errors.Is(err, boot.ErrTimeout) || took > 2*time.Second {
		t.Fatalf("err = %v after %s, want ErrTimeout at the deadline", err, took)
	}
}
