package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/ironcore-dev/os-builder/boot"
)

// maxBody bounds every response body read from the BMC: Redfish resources
// are KiBs, and whatever answers at the BMC's address is outside input.
const maxBody = 4 << 20

// get reads a resource into v and returns its ETag.
func (c *Client) get(ctx context.Context, path string, v any) (string, error) {
	var etag string
	err := c.do(ctx, "GET "+path, func() error {
		resp, err := c.request(ctx, http.MethodGet, path, nil, nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		etag = resp.Header.Get("ETag")
		if err := decodeBody(resp.Body, v); err != nil {
			return fmt.Errorf("decoding %s: %w", path, err)
		}
		return nil
	})
	return etag, err
}

// request sends one request bound to ctx and returns a 2xx response (body
// bounded by maxBody), or the BMC's error as a *schemas.Error. A 401 on a
// session token re-logs in once and resends.
func (c *Client) request(ctx context.Context, method, path string, body any, header map[string]string) (*http.Response, error) {
	return c.requestTraced(ctx, method, path, body, header, nil)
}

// requestTraced is request that sets *wrote once any part of the request
// went onto the wire (nil: not tracked).
func (c *Client) requestTraced(ctx context.Context, method, path string, body any, header map[string]string, wrote *atomic.Bool) (*http.Response, error) {
	c.authMu.Lock()
	sent := c.token
	c.authMu.Unlock()
	resp, err := c.send(ctx, method, path, body, header, wrote)
	if statusOf(err) == http.StatusUnauthorized && sent != "" && c.relogin(ctx, sent) {
		c.authMu.Lock()
		sent = c.token
		c.authMu.Unlock()
		resp, err = c.send(ctx, method, path, body, header, wrote)
	}
	if err == nil && sent != "" {
		c.authMu.Lock()
		if c.token == sent {
			c.tokenWorked = true
		}
		c.authMu.Unlock()
	}
	return resp, err
}

func (c *Client) send(ctx context.Context, method, path string, body any, header map[string]string, wrote *atomic.Bool) (*http.Response, error) {
	target, err := c.resolve(path)
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	if wrote != nil {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteHeaderField: func(string, []string) { wrote.Store(true) }})
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.authMu.Lock()
	token := c.token
	c.authMu.Unlock()
	if token != "" {
		req.Header.Set("X-Auth-Token", token)
	} else if c.auth == AuthBasic {
		req.SetBasicAuth(c.creds.Username, c.creds.Password)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	resp, err := c.hc.Do(req)
	<-c.sem
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		payload, err := io.ReadAll(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("HTTP %d: reading error body: %w", resp.StatusCode, err)
		}
		return nil, schemas.ConstructError(resp.StatusCode, payload)
	}
	return resp, nil
}

// ErrBodyTooLarge means a BMC response exceeded maxBody.
var ErrBodyTooLarge = fmt.Errorf("BMC response larger than %d bytes", maxBody)

// boundedBody caps every response body at maxBody, so no decoder (ours or
// gofish's, which reads error bodies whole) allocates what the BMC sends.
type boundedBody struct{ next http.RoundTripper }

func (b boundedBody) RoundTrip(req *http.Request) (*http.Response, error) {
	next := b.next
	if next == nil {
		next = http.DefaultTransport
	}
	resp, err := next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > maxBody {
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: %w (Content-Length %d)", req.Method, req.URL.Path, ErrBodyTooLarge, resp.ContentLength)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: maxBody}
	return resp, nil
}

type limitedBody struct {
	rc   io.ReadCloser
	left int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		// One byte more tells a body of exactly maxBody from a longer one.
		var one [1]byte
		n, err := l.rc.Read(one[:])
		if n > 0 {
			return 0, ErrBodyTooLarge
		}
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.rc.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }

// decodeBody decodes one JSON document from a BMC response body.
func decodeBody(r io.Reader, v any) error {
	return json.NewDecoder(r).Decode(v)
}

// statusOf is the HTTP status of a gofish error, 0 for transport errors.
func statusOf(err error) int {
	var e *schemas.Error
	if errors.As(err, &e) {
		return e.HTTPReturnedStatusCode
	}
	return 0
}

func retryable(err error) bool {
	switch s := statusOf(err); {
	case s == 0:
		// Off the origin stays off: asking again changes nothing.
		return !errors.Is(err, context.Canceled) && !errors.Is(err, ErrOffOrigin) && !errors.Is(err, errNoToken)
	case s == http.StatusNotImplemented:
		return false // what the BMC does not implement stays so
	case s >= 500, s == http.StatusConflict, s == http.StatusPreconditionFailed, s == http.StatusPreconditionRequired, s == http.StatusTooManyRequests:
		return true
	}
	return false
}

// do runs fn with bounded retries, exponential backoff and full jitter.
func (c *Client) do(ctx context.Context, op string, fn func() error) error {
	var err error
	for attempt := range c.retry.Attempts {
		if err = fn(); err == nil || !retryable(err) {
			return err
		}
		if errors.Is(err, boot.ErrTimeout) {
			return err // a task that outlived its bound: retrying would repeat the action
		}
		if ctx.Err() != nil {
			return c.stopped(ctx, op, err)
		}
		if attempt == c.retry.Attempts-1 {
			break
		}
		backoff := min(c.retry.Base<<attempt, c.retry.Max)
		select {
		case <-ctx.Done():
			return c.stopped(ctx, op, err)
		case <-time.After(backoff/2 + rand.N(backoff/2+1)):
		}
	}
	return fmt.Errorf("%s: giving up after %d attempts: %w", op, c.retry.Attempts, err)
}

// stopped is the error of a call whose context ended while it was still
// failing. A request the deadline cut off is a timeout (the BMC did not
// answer in time); a BMC that kept answering with errors stays a BMC
// failure, its error being the story rather than the deadline.
func (c *Client) stopped(ctx context.Context, op string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %s: BMC did not answer before the deadline: %w", boot.ErrTimeout, op, err)
	}
	return fmt.Errorf("%s: %w (stopped retrying: %v)", op, err, ctx.Err())
}
