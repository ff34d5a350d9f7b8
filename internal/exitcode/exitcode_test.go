package exitcode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

func TestOf(t *testing.T) {
	refused := &url.Error{Op: "Get", URL: "http://r/v2/", Err: &net.OpError{Op: "dial", Err: errors.New("connection refused")}}
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, OK},
		{"plain", errors.New("x"), Failed},
		{"usage", UsageError(errors.New("x")), Usage},
		{"usage wrapped", fmt.Errorf("ctx: %w", UsageError(errors.New("x"))), Usage},
		{"usage inside unavailable", UnavailableError(fmt.Errorf("a: %w", UsageError(errors.New("x")))), Usage},
		{"mismatch inside unavailable", UnavailableError(MismatchError(errors.New("x"))), Mismatch},
		{"deadline inside unavailable", UnavailableError(fmt.Errorf("get: %w", context.DeadlineExceeded)), Timeout},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), Timeout},
		{"timeout mark", TimeoutError(errors.New("x")), Timeout},
		{"unavailable mark", UnavailableError(errors.New("500")), Unavailable},
		{"connection refused", fmt.Errorf("fetch: %w", refused), Unavailable},
		{"registry 503", &transport.Error{StatusCode: http.StatusServiceUnavailable}, Unavailable},
		{"registry 429", &transport.Error{StatusCode: http.StatusTooManyRequests}, Unavailable},
		{"registry 404", &transport.Error{StatusCode: http.StatusNotFound}, Failed},
		{"joined, second branch marked", errors.Join(errors.New("a"), MismatchError(errors.New("b"))), Mismatch},
		{"two %w, marked", fmt.Errorf("%w: %w", errors.New("a"), UsageError(errors.New("b"))), Usage},
		{"own Coder", coder{}, Interrupted},
	}
	for _, tc := range tests {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("%s: Of(%v) = %d, want %d", tc.name, tc.err, got, tc.want)
		}
	}
}

type coder struct{}

func (coder) Error() string { return "mine" }
func (coder) ExitCode() int { return Interrupted }

func TestMarksKeepMessage(t *testing.T) {
	inner := errors.New("bad flag")
	err := UsageError(inner)
	if err.Error() != "bad flag" || !errors.Is(err, inner) || UsageError(nil) != nil {
		t.Errorf("UsageError(%v) = %v", inner, err)
	}
}

func TestTableValuesDistinct(t *testing.T) {
	seen := map[int]string{}
	for _, c := range All {
		if prev, dup := seen[c.Value]; dup {
			t.Errorf("exit code %d is both %s and %s", c.Value, prev, c.Name)
		}
		seen[c.Value] = c.Name
	}
}
