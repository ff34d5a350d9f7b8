package redfish

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// ErrOffOrigin means a path or redirect from the BMC leads off the BMC's
// origin (scheme and host of the endpoint). Paths come from the BMC's
// answers (@odata.id, action targets, Location) and requests carry its
// credentials: "@other-host/x" appended to the endpoint names other-host.
var ErrOffOrigin = errors.New("leads off the BMC's origin")

// maxRedirects is what Go's client allows by default.
const maxRedirects = 10

// resolve turns a path from the BMC (or this client) into a URL on the
// endpoint. Only an absolute path is one: "//host/x", "http://host/x",
// "@host/x", ".example/x" or ":1/x" appended to the endpoint name another
// host or port, and are refused.
func (c *Client) resolve(path string) (string, error) {
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") {
		return "", fmt.Errorf("BMC path %q: %w: not an absolute path", path, ErrOffOrigin)
	}
	u, err := url.Parse(c.endpoint + path)
	if err != nil {
		return "", fmt.Errorf("BMC path %q: %w", path, err)
	}
	if !c.sameOrigin(u) {
		return "", fmt.Errorf("BMC path %q: %w: %s://%s", path, ErrOffOrigin, u.Scheme, u.Host)
	}
	return u.String(), nil
}

// sameOrigin reports whether u is on the endpoint's scheme, host and port
// with the endpoint's user info (normally none).
func (c *Client) sameOrigin(u *url.URL) bool {
	return u.Scheme == c.origin.Scheme && u.Host == c.origin.Host && u.User.String() == c.origin.User.String()
}

// checkRedirect refuses a redirect off the BMC's origin: Go's client keeps
// custom headers such as X-Auth-Token on cross-host redirects. Redirects on
// the origin are followed as next (or Go's default) allows.
func (c *Client) checkRedirect(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if !c.sameOrigin(req.URL) {
			return fmt.Errorf("redirect to %s://%s: %w", req.URL.Scheme, req.URL.Host, ErrOffOrigin)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		return nil
	}
}
