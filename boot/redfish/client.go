// Package redfish is the boot driver's BMC client over Redfish: session auth
// (else basic, as Ironic does) with one re-login on an expired session and
// logout on Close, TLS verification on by default, minimal PATCH bodies with
// If-Match, bounded retries with backoff and jitter (non-idempotent actions
// only when the request provably never reached the BMC), task monitor
// following, virtual media by action or PATCH, and a small vendor quirks
// table. *Client implements boot.BMC.
//
// Every call is bounded by its context, down to each HTTP request, so the
// client sends its own requests; gofish supplies the error type.
package redfish

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/ironcore-dev/os-builder/boot"
)

// Credentials for the BMC. They print redacted, so they never end up in logs.
type Credentials struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

func (c Credentials) String() string   { return fmt.Sprintf("{%s <redacted>}", c.Username) }
func (c Credentials) GoString() string { return c.String() }

// Environment variables CredentialsFromEnv reads.
const (
	EnvUsername = "SERVERBOOT_BMC_USERNAME"
	EnvPassword = "SERVERBOOT_BMC_PASSWORD"
)

// CredentialsFromEnv reads SERVERBOOT_BMC_USERNAME and SERVERBOOT_BMC_PASSWORD.
func CredentialsFromEnv() (Credentials, error) {
	c := Credentials{Username: os.Getenv(EnvUsername), Password: os.Getenv(EnvPassword)}
	if c.Username == "" {
		return c, fmt.Errorf("%s is not set", EnvUsername)
	}
	return c, nil
}

// CredentialsFromFile reads {"username": ..., "password": ...}.
func CredentialsFromFile(path string) (Credentials, error) {
	var c Credentials
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("reading BMC credentials: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		// Never echo the file: it holds a password.
		return Credentials{}, fmt.Errorf("parsing BMC credentials file %s: invalid JSON", path)
	}
	if c.Username == "" {
		return c, fmt.Errorf("BMC credentials file %s has no username", path)
	}
	return c, nil
}

// Retry bounds retries of requests a BMC answers with 5xx, 409 or 412/428
// (ETag races), or that fail at the transport.
type Retry struct {
	Attempts int           // total tries; default 8
	Base     time.Duration // first backoff; default 250ms, doubled per try
	Max      time.Duration // backoff cap; default 8s
}

// Config says how to reach a BMC.
type Config struct {
	Endpoint    string // https://bmc.example
	Credentials Credentials
	// InsecureSkipVerify turns TLS verification off (labs only).
	InsecureSkipVerify bool
	// Auth is AuthAuto (default), AuthSession or AuthBasic.
	Auth Auth
	// BasicAuth is the older spelling of Auth: AuthBasic.
	BasicAuth bool
	// SystemID picks a system by Id; default: the first.
	SystemID string
	Retry    Retry
	// HTTPClient overrides the transport (tests, proxies); it then owns TLS.
	HTTPClient *http.Client
	// TaskPoll is the task monitor poll interval; default 1s.
	TaskPoll time.Duration
	// TaskTimeout bounds following one task monitor when the call's
	// context has no earlier deadline; default 10 minutes.
	TaskTimeout time.Duration
}

// maxBody bounds every response body read from the BMC: Redfish resources
// are KiBs, and whatever answers at the BMC's address is outside input.
const maxBody = 4 << 20

// logoutTimeout bounds the logout in Close, which has no context: a dead
// BMC must not hold the caller.
const logoutTimeout = 10 * time.Second

// ErrOffOrigin means a path or redirect from the BMC leads off the BMC's
// origin (scheme and host of the endpoint). Paths come from the BMC's
// answers (@odata.id, action targets, Location) and requests carry its
// credentials: "@other-host/x" appended to the endpoint names other-host.
var ErrOffOrigin = errors.New("leads off the BMC's origin")

// maxRedirects is what Go's client allows by default.
const maxRedirects = 10

// Auth says how the client authenticates.
type Auth string

const (
	// AuthAuto opens a session where the service offers one and falls
	// back to basic auth where it has no session service or refuses to
	// create a session (404, 405, 501, 400, 401, 403), as Ironic's
	// client does.
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

// Client is a connected BMC.
type Client struct {
	endpoint     string
	origin       *url.URL // the endpoint parsed: every request stays on its scheme and host
	hc           *http.Client
	creds        Credentials
	auth         Auth          // what Connect settled on: AuthSession or AuthBasic
	sessionsPath string        // the SessionService's Sessions collection
	authMu       sync.Mutex    // guards token, sessionPath, tokenWorked
	token        string        // session token (X-Auth-Token)
	sessionPath  string        // session resource, deleted on Close
	tokenWorked  bool          // the current token has had a 2xx answer
	sem          chan struct{} // bounds concurrent requests: BMCs have few slots
	retry        Retry
	taskPoll     time.Duration
	taskTimeout  time.Duration
	systemPath   string
	managerPath  string
	mediaPath    string // "" when there is no CD-capable virtual media
	insertTarget string // "" when the slot has no actions: PATCH instead
	ejectTarget  string
	insertParams insertParams
	resetTarget  string
	manufacturer string
	quirks       Quirks
	modeReported bool
	mu           sync.Mutex // guards modeRequired
	modeRequired bool       // the BMC refused an override without BootSourceOverrideMode
	caps         boot.Capabilities
}

var _ boot.BMC = (*Client)(nil)

// Connect opens a session and discovers the system, its manager and its
// virtual media slot.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("BMC endpoint %q is not an http(s) URL", cfg.Endpoint)
	}
	c := &Client{endpoint: strings.TrimSuffix(cfg.Endpoint, "/"), origin: u, retry: cfg.Retry, taskPoll: cfg.TaskPoll,
		taskTimeout: cfg.TaskTimeout, sem: make(chan struct{}, 2)}
	if c.retry.Attempts <= 0 {
		c.retry.Attempts = 8
	}
	if c.retry.Base <= 0 {
		c.retry.Base = 250 * time.Millisecond
	}
	if c.retry.Max <= 0 {
		c.retry.Max = 8 * time.Second
	}
	if c.taskPoll <= 0 {
		c.taskPoll = time.Second
	}
	if c.taskTimeout <= 0 {
		c.taskTimeout = 10 * time.Minute
	}
	hc := cfg.HTTPClient
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // opt-in for labs
		t.MaxIdleConnsPerHost = 4
		hc = &http.Client{Transport: t, Timeout: 60 * time.Second}
	}
	c.hc = &http.Client{Transport: boundedBody{hc.Transport}, Timeout: hc.Timeout, Jar: hc.Jar, CheckRedirect: c.checkRedirect(hc.CheckRedirect)}
	c.creds = cfg.Credentials
	auth := cfg.Auth
	if cfg.BasicAuth {
		auth = AuthBasic
	}
	if auth, err = ParseAuth(string(auth)); err != nil {
		return nil, err
	}
	if err := c.login(ctx, auth); err != nil {
		return nil, fmt.Errorf("connecting to BMC %s: %w", u.Host, err)
	}
	if err := c.discover(ctx, cfg.SystemID); err != nil {
		c.Close()
		return nil, fmt.Errorf("BMC %s: %w", u.Host, err)
	}
	return c, nil
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
			case auth == AuthSession || !slices.Contains([]int{400, 401, 403, 404, 405, 501}, s):
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

// actionInfo is an action's @Redfish.ActionInfo resource.
type actionInfo struct{ Parameters []struct{ Name string } }

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
	if token == "" {
		return fmt.Errorf("session created without X-Auth-Token")
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

// Manufacturer is the system's (or manager's) manufacturer.
func (c *Client) Manufacturer() string { return c.manufacturer }

// Quirks in effect for this BMC.
func (c *Client) Quirks() Quirks { return c.quirks }

type member struct {
	ID string `json:"@odata.id"`
}

type systemDoc struct {
	ID            string `json:"Id"`
	Manufacturer  string
	PowerState    string
	LastResetTime string
	Boot          struct {
		Enabled        string   `json:"BootSourceOverrideEnabled"`
		EnabledAllowed []string `json:"BootSourceOverrideEnabled@Redfish.AllowableValues"`
		Target         string   `json:"BootSourceOverrideTarget"`
		TargetAllowed  []string `json:"BootSourceOverrideTarget@Redfish.AllowableValues"`
		Mode           *string  `json:"BootSourceOverrideMode"`
		HTTPBootURI    string   `json:"HttpBootUri"`
	}
	VirtualMedia member
	Actions      struct {
		Reset struct {
			Target string `json:"target"`
		} `json:"#ComputerSystem.Reset"`
	}
	Links struct {
		ManagedBy []member
	}
}

type mediaDoc struct {
	MediaTypes []string
	Inserted   bool
	Image      *string
	Actions    struct {
		Insert struct {
			Target     string   `json:"target"`
			ActionInfo string   `json:"@Redfish.ActionInfo"`
			Protocols  []string `json:"TransferProtocolType@Redfish.AllowableValues"`
			Methods    []string `json:"TransferMethod@Redfish.AllowableValues"`
		} `json:"#VirtualMedia.InsertMedia"`
		Eject struct {
			Target string `json:"target"`
		} `json:"#VirtualMedia.EjectMedia"`
	}
}

func (c *Client) discover(ctx context.Context, systemID string) error {
	var systems struct{ Members []member }
	if _, err := c.get(ctx, "/redfish/v1/Systems", &systems); err != nil {
		return fmt.Errorf("listing systems: %w", err)
	}
	var sys systemDoc
	for _, m := range systems.Members {
		if _, err := c.get(ctx, m.ID, &sys); err != nil {
			return fmt.Errorf("reading system %s: %w", m.ID, err)
		}
		if systemID == "" || sys.ID == systemID {
			c.systemPath = m.ID
			break
		}
	}
	if c.systemPath == "" {
		return fmt.Errorf("no system %q among %d systems", systemID, len(systems.Members))
	}
	c.resetTarget = sys.Actions.Reset.Target
	if c.resetTarget == "" {
		c.resetTarget = c.systemPath + "/Actions/ComputerSystem.Reset"
	}
	if len(sys.Links.ManagedBy) > 0 {
		c.managerPath = sys.Links.ManagedBy[0].ID
	}
	var mgr struct {
		Manufacturer string
		VirtualMedia member
	}
	if c.managerPath != "" {
		if _, err := c.get(ctx, c.managerPath, &mgr); err != nil {
			return fmt.Errorf("reading manager: %w", err)
		}
	}
	c.manufacturer = sys.Manufacturer
	if c.manufacturer == "" {
		c.manufacturer = mgr.Manufacturer
	}
	// Virtual media sits under the system on newer BMCs, the manager on older.
	for _, coll := range []string{sys.VirtualMedia.ID, mgr.VirtualMedia.ID} {
		if coll == "" || c.mediaPath != "" {
			continue
		}
		var vm struct{ Members []member }
		if _, err := c.get(ctx, coll, &vm); err != nil {
			if statusOf(err) == http.StatusNotFound {
				continue
			}
			return fmt.Errorf("listing virtual media: %w", err)
		}
		for _, m := range vm.Members {
			var md mediaDoc
			if _, err := c.get(ctx, m.ID, &md); err != nil {
				return fmt.Errorf("reading virtual media %s: %w", m.ID, err)
			}
			if slices.ContainsFunc(md.MediaTypes, func(t string) bool { return t == "CD" || t == "DVD" }) {
				c.mediaPath, c.insertTarget, c.ejectTarget = m.ID, md.Actions.Insert.Target, md.Actions.Eject.Target
				c.insertParams = insertParams{protocol: len(md.Actions.Insert.Protocols) > 0, method: len(md.Actions.Insert.Methods) > 0}
				if ai := md.Actions.Insert.ActionInfo; ai != "" && c.insertTarget != "" {
					c.insertParams.fromActionInfo(ctx, c, ai)
				}
				break
			}
		}
	}
	c.quirks = QuirksFor(c.manufacturer).refine(sys.Boot.TargetAllowed, sys.Boot.EnabledAllowed)
	c.modeReported = sys.Boot.Mode != nil
	c.caps = boot.Capabilities{Manufacturer: c.manufacturer, VirtualMediaCD: c.mediaPath != "", ContinuousSupported: !c.quirks.NoContinuous}
	for _, t := range sys.Boot.TargetAllowed {
		c.caps.AllowedTargets = append(c.caps.AllowedTargets, c.quirks.fromVendor(t))
	}
	return nil
}

// Capabilities as discovered at Connect.
func (c *Client) Capabilities(ctx context.Context) (boot.Capabilities, error) {
	return c.caps, nil
}

// BootOverride reads the override, in the plan's target spelling.
func (c *Client) BootOverride(ctx context.Context) (boot.Override, error) {
	var sys systemDoc
	if _, err := c.get(ctx, c.systemPath, &sys); err != nil {
		return boot.Override{}, fmt.Errorf("reading boot override: %w", err)
	}
	o := boot.Override{Target: c.quirks.fromVendor(sys.Boot.Target), Enabled: sys.Boot.Enabled, HTTPBootURI: sys.Boot.HTTPBootURI}
	if sys.Boot.Mode != nil {
		o.Mode = *sys.Boot.Mode
	}
	return o, nil
}

// bootPatch is the whole PATCH body: only the properties we set, never the
// object we read (BMCs reject read-only properties sent back).
type bootPatch struct {
	Boot struct {
		Enabled     string `json:"BootSourceOverrideEnabled,omitempty"`
		Target      string `json:"BootSourceOverrideTarget,omitempty"`
		Mode        string `json:"BootSourceOverrideMode,omitempty"`
		HTTPBootURI string `json:"HttpBootUri,omitempty"`
	}
}

// SetBootOverride PATCHes a fresh minimal Boot object with If-Match; on 412
// (someone changed the system) it re-reads the ETag and tries again.
func (c *Client) SetBootOverride(ctx context.Context, o boot.Override) error {
	var p bootPatch
	p.Boot.Target = c.quirks.toVendor(o.Target)
	p.Boot.Enabled = o.Enabled
	if o.Enabled == boot.EnabledContinuous && c.quirks.NoContinuous {
		p.Boot.Enabled = boot.EnabledOnce
	}
	if o.Mode != "" && o.Enabled != boot.EnabledDisabled &&
		(c.quirks.SendOverrideMode == "always" || c.quirks.SendOverrideMode == "" && c.modeReported) {
		p.Boot.Mode = o.Mode
	}
	c.mu.Lock()
	if c.modeRequired && p.Boot.Mode == "" {
		p.Boot.Mode = cmp.Or(o.Mode, "UEFI")
	}
	c.mu.Unlock()
	if o.Target == boot.TargetUefiHttp {
		p.Boot.HTTPBootURI = o.HTTPBootURI
	}
	err := c.do(ctx, "set boot override", func() error {
		etag, err := c.get(ctx, c.systemPath, &struct{}{})
		if err != nil {
			return err
		}
		h := map[string]string{}
		if etag != "" {
			h["If-Match"] = etag
		}
		resp, err := c.request(ctx, http.MethodPatch, c.systemPath, p, h)
		if statusOf(err) == http.StatusPreconditionRequired && etag == "" {
			resp, err = c.request(ctx, http.MethodPatch, c.systemPath, p, map[string]string{"If-Match": "*"})
		}
		if statusOf(err) == http.StatusBadRequest && p.Boot.Mode == "" && strings.Contains(err.Error(), "BootSourceOverrideMode") {
			// A BMC that does not report the mode yet requires it (some
			// refuse any override without it): send it from now on. The
			// PATCH was refused, so sending it again is safe.
			p.Boot.Mode = cmp.Or(o.Mode, "UEFI")
			c.mu.Lock()
			c.modeRequired = true
			c.mu.Unlock()
			resp, err = c.request(ctx, http.MethodPatch, c.systemPath, p, h)
		}
		if err != nil {
			return err
		}
		return c.finish(ctx, resp)
	})
	if err != nil {
		return fmt.Errorf("setting boot override %s/%s: %w", p.Boot.Target, p.Boot.Enabled, err)
	}
	return nil
}

// Media reads the CD slot.
func (c *Client) Media(ctx context.Context) (boot.Media, error) {
	if c.mediaPath == "" {
		return boot.Media{}, fmt.Errorf("%w: no virtual media CD slot", boot.ErrCapability)
	}
	var md mediaDoc
	if _, err := c.get(ctx, c.mediaPath, &md); err != nil {
		return boot.Media{}, fmt.Errorf("reading virtual media: %w", err)
	}
	m := boot.Media{Inserted: md.Inserted}
	if md.Image != nil {
		m.Image = *md.Image
	}
	return m, nil
}

// insertParams says which optional InsertMedia parameters the BMC lists
// (AllowableValues on the action, or its ActionInfo): some BMCs require
// TransferProtocolType / TransferMethod, others reject what they do not know.
type insertParams struct{ protocol, method bool }

func (p *insertParams) fromActionInfo(ctx context.Context, c *Client, path string) {
	var ai actionInfo
	if _, err := c.get(ctx, path, &ai); err != nil {
		return // optional: the 400 retry still covers a BMC that needs them
	}
	for _, prm := range ai.Parameters {
		p.protocol = p.protocol || prm.Name == "TransferProtocolType"
		p.method = p.method || prm.Name == "TransferMethod"
	}
}

// InsertMedia inserts image write-protected: by the InsertMedia action, or,
// where the slot has none (Lenovo XCC and others), by PATCHing Image,
// Inserted and WriteProtected.
func (c *Client) InsertMedia(ctx context.Context, image string) error {
	if c.mediaPath == "" {
		return fmt.Errorf("%w: no virtual media CD slot", boot.ErrCapability)
	}
	inserted := func(ctx context.Context) (bool, error) {
		m, err := c.Media(ctx)
		return m.Inserted && m.Image == image, err
	}
	var err error
	if c.insertTarget == "" {
		err = c.patchMedia(ctx, map[string]any{"Image": image, "Inserted": true, "WriteProtected": true})
	} else {
		err = c.postAction(ctx, "insert media", c.insertTarget, c.insertBody(image, c.insertParams), inserted)
		if statusOf(err) == http.StatusBadRequest && (!c.insertParams.protocol || !c.insertParams.method) &&
			(strings.Contains(err.Error(), "TransferProtocolType") || strings.Contains(err.Error(), "TransferMethod")) {
			// The BMC names a parameter it wants: send both, once.
			err = c.postAction(ctx, "insert media", c.insertTarget, c.insertBody(image, insertParams{true, true}), inserted)
		}
	}
	if err != nil {
		return fmt.Errorf("inserting virtual media %s: %w", image, err)
	}
	return nil
}

// insertBody is InsertMedia's body. Inserted and WriteProtected are left
// out: true is their schema default, and Supermicro X11/X12 answer 400
// ActionParameterUnknown when they are sent (sushy's virtual_media.py
// leaves them out for the same reason).
func (c *Client) insertBody(image string, p insertParams) map[string]any {
	body := map[string]any{"Image": image}
	if p.protocol {
		if u, err := url.Parse(image); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
			body["TransferProtocolType"] = strings.ToUpper(u.Scheme)
		}
	}
	if p.method {
		body["TransferMethod"] = "Stream"
	}
	return body
}

// patchMedia PATCHes the CD slot with If-Match (a fresh ETag per try, so a
// 412 is retried with the current one). PATCH sets values: repeating it is
// safe.
func (c *Client) patchMedia(ctx context.Context, body map[string]any) error {
	return c.do(ctx, "patch virtual media", func() error {
		etag, err := c.get(ctx, c.mediaPath, &struct{}{})
		if err != nil {
			return err
		}
		h := map[string]string{}
		if etag != "" {
			h["If-Match"] = etag
		}
		resp, err := c.request(ctx, http.MethodPatch, c.mediaPath, body, h)
		if err != nil {
			return err
		}
		return c.finish(ctx, resp)
	})
}

// EjectMedia ejects the CD slot unless it is empty already.
func (c *Client) EjectMedia(ctx context.Context) error {
	m, err := c.Media(ctx)
	if err != nil {
		return err
	}
	if !m.Inserted {
		return nil
	}
	if c.insertTarget == "" && c.ejectTarget == "" {
		err = c.patchMedia(ctx, map[string]any{"Image": nil, "Inserted": false})
	} else {
		err = c.postAction(ctx, "eject media", c.ejectTarget, struct{}{}, func(ctx context.Context) (bool, error) {
			m, err := c.Media(ctx)
			return !m.Inserted, err
		})
	}
	if err != nil {
		return fmt.Errorf("ejecting virtual media: %w", err)
	}
	return nil
}

// PowerState reads the system's power state.
func (c *Client) PowerState(ctx context.Context) (string, error) {
	var sys systemDoc
	if _, err := c.get(ctx, c.systemPath, &sys); err != nil {
		return "", fmt.Errorf("reading power state: %w", err)
	}
	return sys.PowerState, nil
}

// Reset performs ComputerSystem.Reset and follows its task monitor. When
// the answer is lost after the request reached the BMC, it re-reads the
// system: a changed LastResetTime, or On reached for "On", means the BMC
// acted; otherwise the reset is reported failed, never sent again.
func (c *Client) Reset(ctx context.Context, resetType string) error {
	var before systemDoc
	if _, err := c.get(ctx, c.systemPath, &before); err != nil {
		return fmt.Errorf("reset %s: reading system: %w", resetType, err)
	}
	acted := func(ctx context.Context) (bool, error) {
		var now systemDoc
		if _, err := c.get(ctx, c.systemPath, &now); err != nil {
			return false, err
		}
		if now.LastResetTime != "" && now.LastResetTime != before.LastResetTime {
			return true, nil
		}
		return resetType == "On" && before.PowerState == "Off" && now.PowerState == "On", nil
	}
	if err := c.postAction(ctx, "reset "+resetType, c.resetTarget, map[string]string{"ResetType": resetType}, acted); err != nil {
		return fmt.Errorf("reset %s: %w", resetType, err)
	}
	return nil
}

// ErrMaybeActed marks a non-idempotent action whose request reached the BMC
// but whose outcome is unknown, and the re-read state does not show it done:
// sending it again could act twice (a second ForceRestart).
var ErrMaybeActed = errors.New("the request reached the BMC but no answer came back; not repeating it")

// postAction POSTs a non-idempotent action. It retries only a request that
// provably never reached the BMC (nothing written: dial or connect failure)
// or that the BMC refused before acting (429, 503); any other failure
// re-reads the state with acted, which decides.
func (c *Client) postAction(ctx context.Context, op, target string, body any, acted func(context.Context) (bool, error)) error {
	if target == "" {
		return fmt.Errorf("%w: BMC offers no %s action", boot.ErrCapability, op)
	}
	var maybe error
	err := c.do(ctx, op, func() error {
		var wrote atomic.Bool
		resp, err := c.requestTraced(ctx, http.MethodPost, target, body, nil, &wrote)
		if err == nil {
			return c.finish(ctx, resp)
		}
		switch s := statusOf(err); {
		case s == http.StatusTooManyRequests, s == http.StatusServiceUnavailable, s == 0 && !wrote.Load():
			return err // not acted on: retry
		case s == 0, s >= 500:
			maybe = err
			return nil
		}
		return err
	})
	if err != nil || maybe == nil {
		return err
	}
	ok, rerr := acted(ctx)
	if rerr == nil && ok {
		return nil
	}
	if rerr != nil {
		return fmt.Errorf("%s: %w: %w (re-reading state: %v)", op, ErrMaybeActed, maybe, rerr)
	}
	return fmt.Errorf("%s: %w: %w", op, ErrMaybeActed, maybe)
}

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

// finish follows a 202 task monitor to completion, else closes the body.
// Following is bounded by ctx and by the client's task timeout: a monitor
// that answers 202 forever ends with boot.ErrTimeout naming it.
func (c *Client) finish(ctx context.Context, resp *http.Response) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, c.taskTimeout)
	defer cancel()
	var loc, state string
	for resp.StatusCode == http.StatusAccepted {
		if l := resp.Header.Get("Location"); l != "" {
			loc = l
		}
		state = taskState(resp.Body)
		resp.Body.Close()
		if err := taskFailed(state); err != nil {
			return err
		}
		if loc == "" {
			return nil // accepted without a monitor: nothing to follow
		}
		if u, err := url.Parse(loc); err == nil && u.IsAbs() {
			loc = u.RequestURI()
		}
		select {
		case <-ctx.Done():
			return c.taskTimedOut(ctx, loc, state, start)
		case <-time.After(c.taskPoll):
		}
		var err error
		if resp, err = c.request(ctx, http.MethodGet, loc, nil, nil); err != nil {
			if ctx.Err() != nil {
				return c.taskTimedOut(ctx, loc, state, start)
			}
			return fmt.Errorf("task monitor %s: %w", loc, err)
		}
	}
	state = taskState(resp.Body)
	resp.Body.Close()
	return taskFailed(state)
}

// taskTimedOut says which monitor was still running when ctx ended.
func (c *Client) taskTimedOut(ctx context.Context, loc, state string, start time.Time) error {
	if state == "" {
		state = "unknown"
	}
	err := fmt.Errorf("task monitor %s still running (TaskState %s) after %s", loc, state, time.Since(start).Round(time.Millisecond))
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%w: %w", err, ctx.Err())
	}
	return fmt.Errorf("%w: %w: %w", boot.ErrTimeout, err, ctx.Err())
}

// taskState is the TaskState of a task (monitor) body; "" if the body is
// empty or not a task.
func taskState(r io.Reader) string {
	var task struct{ TaskState string }
	if err := decodeBody(r, &task); err != nil {
		return ""
	}
	return task.TaskState
}

func taskFailed(state string) error {
	switch state {
	case "Exception", "Killed", "Cancelled":
		return fmt.Errorf("task ended %s", state)
	}
	return nil
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
		return !errors.Is(err, context.Canceled) && !errors.Is(err, ErrOffOrigin)
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
