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
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

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
	// Logf, if set, is told once when AuthAuto settles on basic auth
	// because the BMC would not give a session.
	Logf func(format string, args ...any)
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
	logf         func(format string, args ...any)
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
	c.creds, c.logf = cfg.Credentials, cfg.Logf
	if c.logf == nil {
		c.logf = func(string, ...any) {}
	}
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

// Manufacturer is the system's (or manager's) manufacturer.
func (c *Client) Manufacturer() string { return c.manufacturer }

// Quirks in effect for this BMC.
func (c *Client) Quirks() Quirks { return c.quirks }
