package redfish

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/ironcore-dev/os-builder/boot"
)

// logoutTimeout bounds the logout in Close, which has no context: a dead
// BMC must not hold the caller.
const logoutTimeout = 10 * time.Second

// Auth says how the client authenticates.
type Auth string

const (
	// AuthAuto opens a session where the service offers one and falls
	// back to basic auth where it has no session service, refuses to
	// create a session (404, 405, 501, 400, 401, 403) or answers the
	// session POST without a usable X-Auth-Token, as Ironic's client
	// (sushy's SessionOrBasicAuth) does.
	AuthAuto Auth = "auto"
	// AuthSession requires a session (X-Auth-Token).
	AuthSession Auth = "session"
	// AuthBasic sends HTTP basic auth with every request.
	AuthBasic Auth = "basic"
)

// ParseAuth reads auto, session or basic ("" is auto).
func ParseAuth(s string) (Auth, error) {
	switch a := Auth(s); a {
	case "":
		return AuthAuto, nil
	case AuthAuto, AuthSession, AuthBasic:
		return a, nil
	}
	return "", fmt.Errorf("unknown auth %q (want auto, session or basic)", s)
}

// login settles the auth: a session where asked for or offered, else
// basic auth (AuthAuto). Basic auth is checked with one authenticated GET,
// so bad credentials fail here, not at the first action.
func (c *Client) login(ctx context.Context, auth Auth) error {
	var root serviceRoot
	if _, err := c.get(ctx, "/redfish/v1/", &root); err != nil {
		return fmt.Errorf("reading service root: %w", err)
	}
	c.sessionsPath = root.Links.Sessions.ID
	if c.sessionsPath == "" && root.SessionService.ID != "" {
		c.sessionsPath = strings.TrimSuffix(root.SessionService.ID, "/") + "/Sessions"
	}
	if auth != AuthBasic {
		if c.sessionsPath == "" {
			if auth == AuthSession {
				return fmt.Errorf("%w: --auth session: the service root has no SessionService or Links.Sessions", boot.ErrCapability)
			}
		} else {
			err := c.do(ctx, "create session", func() error { return c.createSession(ctx) })
			switch s := statusOf(err); {
			case err == nil:
				c.auth = AuthSession
				return nil
			case auth == AuthSession:
				return fmt.Errorf("creating session: %w", err)
			case errors.Is(err, errNoToken):
				c.logf("redfish: the BMC answered the session request without a usable X-Auth-Token; using HTTP basic auth")
			case slices.Contains([]int{400, 401, 403, 404, 405, 501}, s):
				c.logf("redfish: the BMC refused a session (HTTP %d); using HTTP basic auth", s)
			default:
				return fmt.Errorf("creating session: %w", err)
			}
		}
	}
	c.auth = AuthBasic
	if _, err := c.get(ctx, "/redfish/v1/Systems", &struct{}{}); err != nil {
		return fmt.Errorf("basic auth: %w", err)
	}
	return nil
}

// serviceRoot is what login reads of /redfish/v1/.
type serviceRoot struct {
	SessionService member
	Links          struct{ Sessions member }
}

// sessionDoc is the body of a created session.
type sessionDoc struct {
	ID string `json:"@odata.id"`
}

// createSession POSTs the credentials to the Sessions collection and keeps
// the token and the session's address (for logout).
func (c *Client) createSession(ctx context.Context) error {
	resp, err := c.send(ctx, http.MethodPost, c.sessionsPath, map[string]string{"UserName": c.creds.Username, "Password": c.creds.Password}, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var s sessionDoc
	_ = decodeBody(resp.Body, &s)
	token := resp.Header.Get("X-Auth-Token")
	if !usableToken(token) {
		// Not transient: the same BMC answers the same way again.
		return fmt.Errorf("%w (HTTP %d)", errNoToken, resp.StatusCode)
	}
	loc := resp.Header.Get("Location")
	if u, err := url.Parse(loc); err == nil && u.IsAbs() {
		loc = u.RequestURI()
	}
	if loc == "" {
		loc = s.ID
	}
	c.authMu.Lock()
	c.token, c.sessionPath = token, loc
	c.authMu.Unlock()
	return nil
}

// errNoToken is a session POST answered 2xx without a usable token (IronCore
// metal-operator's mock BMC answers 201 {"status":"created"} and no
// header). It is not retried: AuthAuto falls back to basic auth at once.
var errNoToken = errors.New("session created without a usable X-Auth-Token")

// maxToken bounds a session token: real ones are 16-64 characters, JWTs a
// few hundred; the token goes into every request header.
const maxToken = 8 << 10

// usableToken says whether a session token can be sent back as a header
// value: non-empty, bounded, visible ASCII only.
func usableToken(tok string) bool {
	if tok == "" || len(tok) > maxToken {
		return false
	}
	for i := range len(tok) {
		if tok[i] < 0x21 || tok[i] > 0x7e {
			return false
		}
	}
	return true
}

// relogin opens a new session after a 401 on a request sent with token
// sent. A session that expires after it worked is re-opened, as often as a
// long run outlives sessions; a token refused before any answer is not (a
// BMC that rejects fresh tokens would otherwise get a login per request).
// Concurrent requests that saw the same expired token share one re-login.
func (c *Client) relogin(ctx context.Context, sent string) bool {
	c.authMu.Lock()
	if c.token != sent {
		c.authMu.Unlock()
		return true // someone re-logged in already
	}
	if !c.tokenWorked {
		c.authMu.Unlock()
		return false
	}
	c.token, c.sessionPath, c.tokenWorked = "", "", false
	c.authMu.Unlock()
	return c.createSession(ctx) == nil
}

// Close logs out of the session, waiting at most logoutTimeout.
func (c *Client) Close() error {
	c.authMu.Lock()
	sp := c.sessionPath
	c.sessionPath = ""
	c.authMu.Unlock()
	if sp != "" {
		ctx, cancel := context.WithTimeout(context.Background(), logoutTimeout)
		defer cancel()
		if resp, err := c.request(ctx, http.MethodDelete, sp, nil, nil); err == nil {
			resp.Body.Close()
		}
	}
	c.hc.CloseIdleConnections()
	return nil
}
