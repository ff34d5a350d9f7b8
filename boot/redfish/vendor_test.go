package redfish

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// vendorBMC is a small Redfish service that behaves as shipped BMCs do where
// they differ from this project's emulator. Its bodies follow public
// material:
//   - service root, system and manager shapes: DMTF Redfish-Mockup-Server,
//     public-rackmount1 (ServiceRoot Links.Sessions, ComputerSystem Boot
//     with BootSourceOverrideTarget@Redfish.AllowableValues, LastResetTime);
//   - a service without SessionService and basic auth only: gofish's
//     client_test.go serves such a root; Ironic's redfish driver (sushy)
//     falls back to basic auth for it ("session, else basic");
//   - VirtualMedia without InsertMedia/EjectMedia, set by PATCH of Image /
//     Inserted / WriteProtected: Lenovo XCC (lenovo/python-redfish-lenovo,
//     lenovo_mount_virtual_media.py) and sushy's virtual_media.py PATCH path;
//   - InsertMedia answering 400 without TransferMethod / TransferProtocolType:
//     sushy's virtual_media.py retries with them on such a 400;
//   - PATCH requiring If-Match and answering 412 to a stale ETag: gofish's
//     SetBoot (iDRAC) and the Redfish spec's ETag rules.
type vendorBMC struct {
	mu sync.Mutex
	t  *testing.T

	noSessions      bool // no SessionService, no Links.Sessions
	refuseSessions  int  // status for POST to Sessions (0: create)
	sessionNoToken  bool // POST to Sessions: 201 {"status":"created"}, no X-Auth-Token (metal-operator's mock)
	sessionPosts    int
	processors      []map[string]any // Systems/1/Processors members (nil: no collection linked)
	expireAfter     int              // a session token dies after this many uses (0: never)
	rejectTokens    bool             // every token is refused (a BMC that lost its session store)
	mediaUnder      string
	mediaActions    bool
	needTransfer    bool // InsertMedia 400s without TransferMethod
	requireIfMatch  bool
	needMode        bool          // Systems PATCH 400s without BootSourceOverrideMode, yet GET does not report it
	resetHang       time.Duration // act on Reset, then answer this late
	etag            int
	tokens          map[string]int
	sessionsCreated int
	resets          []string
	lastReset       int
	power           string
	image           string
	inserted        bool
	writeProtected  bool
	patches         []map[string]any
	inserts         []map[string]any
}

func newVendorBMC(t *testing.T, v *vendorBMC) (*vendorBMC, string) {
	v.t, v.tokens, v.power = t, map[string]int{}, "On"
	if v.mediaUnder == "" {
		v.mediaUnder = "/redfish/v1/Managers/1"
	}
	ts := httptest.NewServer(v)
	t.Cleanup(ts.Close)
	return v, ts.URL
}

func (v *vendorBMC) media() string { return v.mediaUnder + "/VirtualMedia/CD1" }

func (v *vendorBMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	unlock := sync.OnceFunc(v.mu.Unlock)
	defer unlock()
	p := strings.TrimSuffix(r.URL.Path, "/")
	reply := func(status int, body any) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("ETag", fmt.Sprintf(`W/"%d"`, v.etag))
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}
	fail := func(status int, msg string) {
		reply(status, map[string]any{"error": map[string]any{"code": "Base.1.8.GeneralError", "message": msg}})
	}
	if p == "/redfish/v1" {
		root := map[string]any{"@odata.id": "/redfish/v1/", "Systems": map[string]string{"@odata.id": "/redfish/v1/Systems"}}
		if !v.noSessions {
			root["SessionService"] = map[string]string{"@odata.id": "/redfish/v1/SessionService"}
			root["Links"] = map[string]any{"Sessions": map[string]string{"@odata.id": "/redfish/v1/SessionService/Sessions"}}
		}
		reply(200, root)
		return
	}
	if r.Method == http.MethodPost && p == "/redfish/v1/SessionService/Sessions" && !v.noSessions {
		v.sessionPosts++
		if v.sessionNoToken {
			reply(201, map[string]string{"status": "created"})
			return
		}
		if v.refuseSessions != 0 {
			fail(v.refuseSessions, "session creation refused")
			return
		}
		var c struct{ UserName, Password string }
		_ = json.NewDecoder(r.Body).Decode(&c)
		if c.UserName != "admin" || c.Password != "password" {
			fail(401, "bad credentials")
			return
		}
		v.sessionsCreated++
		tok := fmt.Sprintf("tok%d", v.sessionsCreated)
		v.tokens[tok] = 0
		w.Header().Set("X-Auth-Token", tok)
		w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/"+tok)
		reply(201, map[string]string{"@odata.id": "/redfish/v1/SessionService/Sessions/" + tok})
		return
	}
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		n, ok := v.tokens[tok]
		if !ok || v.rejectTokens || (v.expireAfter > 0 && n >= v.expireAfter) {
			fail(401, "session expired")
			return
		}
		v.tokens[tok] = n + 1
	} else if u, pw, ok := r.BasicAuth(); !ok || u != "admin" || pw != "password" {
		fail(401, "authentication required")
		return
	}
	switch {
	case r.Method == http.MethodDelete && strings.HasPrefix(p, "/redfish/v1/SessionService/Sessions/"):
		delete(v.tokens, strings.TrimPrefix(p, "/redfish/v1/SessionService/Sessions/"))
		reply(204, nil)
	case p == "/redfish/v1/Systems":
		reply(200, map[string]any{"Members": []map[string]string{{"@odata.id": "/redfish/v1/Systems/1"}}})
	case p == "/redfish/v1/Systems/1" && r.Method == http.MethodGet:
		sys := map[string]any{"Id": "1", "Manufacturer": "Contoso", "PowerState": v.power,
			"LastResetTime": fmt.Sprintf("2026-01-01T00:00:%02d+00:00", v.lastReset),
			"Boot": map[string]any{"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None",
				"BootSourceOverrideTarget@Redfish.AllowableValues": []string{"None", "Pxe", "Cd", "Hdd", "UefiHttp"}},
			"Actions": map[string]any{"#ComputerSystem.Reset": map[string]string{"target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"}},
			"Links":   map[string]any{"ManagedBy": []map[string]string{{"@odata.id": "/redfish/v1/Managers/1"}}}}
		if v.mediaUnder == "/redfish/v1/Systems/1" {
			sys["VirtualMedia"] = map[string]string{"@odata.id": "/redfish/v1/Systems/1/VirtualMedia"}
		}
		if v.processors != nil {
			sys["Processors"] = map[string]string{"@odata.id": "/redfish/v1/Systems/1/Processors"}
		}
		reply(200, sys)
	case p == "/redfish/v1/Systems/1/Processors" && v.processors != nil:
		var ms []map[string]string
		for i := range v.processors {
			ms = append(ms, map[string]string{"@odata.id": fmt.Sprintf("/redfish/v1/Systems/1/Processors/%d", i)})
		}
		reply(200, map[string]any{"Members": ms})
	case strings.HasPrefix(p, "/redfish/v1/Systems/1/Processors/") && v.processors != nil:
		var i int
		if _, err := fmt.Sscanf(strings.TrimPrefix(p, "/redfish/v1/Systems/1/Processors/"), "%d", &i); err != nil || i >= len(v.processors) {
			fail(404, "no "+p)
			return
		}
		reply(200, v.processors[i])
	case p == "/redfish/v1/Managers/1":
		mgr := map[string]any{"Id": "1"}
		if v.mediaUnder == "/redfish/v1/Managers/1" {
			mgr["VirtualMedia"] = map[string]string{"@odata.id": "/redfish/v1/Managers/1/VirtualMedia"}
		}
		reply(200, mgr)
	case p == v.mediaUnder+"/VirtualMedia":
		// A removable-disk slot first: the client must choose by MediaTypes.
		reply(200, map[string]any{"Members": []map[string]string{{"@odata.id": v.mediaUnder + "/VirtualMedia/Floppy1"}, {"@odata.id": v.media()}}})
	case p == v.mediaUnder+"/VirtualMedia/Floppy1":
		reply(200, map[string]any{"MediaTypes": []string{"Floppy", "USBStick"}, "Inserted": false})
	case p == v.media() && r.Method == http.MethodGet:
		vm := map[string]any{"MediaTypes": []string{"CD", "DVD"}, "Inserted": v.inserted, "Image": v.image, "WriteProtected": v.writeProtected}
		if v.image == "" {
			vm["Image"] = nil
		}
		if v.mediaActions {
			vm["Actions"] = map[string]any{
				"#VirtualMedia.InsertMedia": map[string]string{"target": v.media() + "/Actions/VirtualMedia.InsertMedia"},
				"#VirtualMedia.EjectMedia":  map[string]string{"target": v.media() + "/Actions/VirtualMedia.EjectMedia"}}
		}
		reply(200, vm)
	case (p == v.media() || p == "/redfish/v1/Systems/1") && r.Method == http.MethodPatch:
		if m := r.Header.Get("If-Match"); v.requireIfMatch && m != fmt.Sprintf(`W/"%d"`, v.etag) {
			fail(412, "stale ETag "+m)
			return
		}
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		if bootBody, _ := body["Boot"].(map[string]any); v.needMode && bootBody != nil && bootBody["BootSourceOverrideMode"] != "UEFI" {
			fail(400, "The property BootSourceOverrideMode is a required property and must be included in the request")
			return
		}
		v.patches = append(v.patches, body)
		if p == v.media() {
			if v.mediaActions {
				fail(405, "PATCH not allowed")
				return
			}
			img, _ := body["Image"].(string)
			v.image, v.inserted = img, body["Inserted"] == true
			v.writeProtected = body["WriteProtected"] == true
		}
		v.etag++
		reply(200, map[string]any{})
	case p == v.media()+"/Actions/VirtualMedia.InsertMedia" && v.mediaActions:
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		v.inserts = append(v.inserts, body)
		if v.needTransfer && (body["TransferMethod"] == nil || body["TransferProtocolType"] == nil) {
			fail(400, "The action InsertMedia requires the parameter TransferMethod to be present")
			return
		}
		v.image, v.inserted = body["Image"].(string), true
		reply(204, nil)
	case p == v.media()+"/Actions/VirtualMedia.EjectMedia" && v.mediaActions:
		v.image, v.inserted = "", false
		reply(204, nil)
	case p == "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset":
		var body struct{ ResetType string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		v.resets = append(v.resets, body.ResetType)
		v.lastReset++
		v.power = "On"
		if v.resetHang > 0 {
			// Acted; the answer never comes in time.
			unlock()
			select {
			case <-time.After(v.resetHang):
			case <-r.Context().Done():
			}
			return
		}
		reply(204, nil)
	default:
		fail(404, "no "+p)
	}
}

func vendorConnect(t *testing.T, url string, cfg Config) *Client {
	t.Helper()
	cfg.Endpoint = url
	cfg.Credentials = Credentials{Username: "admin", Password: "password"}
	if cfg.Retry.Attempts == 0 {
		cfg.Retry = Retry{Attempts: 3, Base: time.Millisecond}
	}
	c, err := Connect(t.Context(), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestAuthAuto: a service without a session service, or one refusing
// session creation, is reached with basic auth; --auth session refuses it
// naming what is missing. Before: "no target provided" after 8 attempts.
func TestAuthAuto(t *testing.T) {
	tests := []struct {
		name     string
		bmc      *vendorBMC
		auth     Auth
		wantAuth Auth
		wantErr  string
		wantLog  string // the one line said on falling back ("" none)
	}{
		{"sessions", &vendorBMC{}, "", AuthSession, "", ""},
		{"no session service", &vendorBMC{noSessions: true}, "", AuthBasic, "", ""},
		{"session creation 405", &vendorBMC{refuseSessions: 405}, AuthAuto, AuthBasic, "", "refused a session (HTTP 405); using HTTP basic auth"},
		{"session creation 501", &vendorBMC{refuseSessions: 501}, AuthAuto, AuthBasic, "", "refused a session (HTTP 501)"},
		// metal-operator v0.7.0's mock BMC: 201 and no token. Not
		// transient: one POST, then basic auth (it was 8 POSTs and a
		// failed connect).
		{"session without token", &vendorBMC{sessionNoToken: true}, AuthAuto, AuthBasic, "", "without a usable X-Auth-Token; using HTTP basic auth"},
		{"basic asked", &vendorBMC{}, AuthBasic, AuthBasic, "", ""},
		{"session required, none offered", &vendorBMC{noSessions: true}, AuthSession, "", "no SessionService", ""},
		{"session required, refused", &vendorBMC{refuseSessions: 405}, AuthSession, "", "405", ""},
		{"session required, no token", &vendorBMC{sessionNoToken: true}, AuthSession, "", "without a usable X-Auth-Token (HTTP 201)", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, url := newVendorBMC(t, tc.bmc)
			var logged []string
			c, err := Connect(t.Context(), Config{Endpoint: url, Auth: tc.auth, Credentials: Credentials{Username: "admin", Password: "password"},
				Retry: Retry{Attempts: 3, Base: time.Millisecond}, Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }})
			if v.sessionPosts > 1 {
				t.Errorf("%d session POSTs: a refused or tokenless session is not retried", v.sessionPosts)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to name %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.auth != tc.wantAuth {
				t.Errorf("auth %s, want %s", c.auth, tc.wantAuth)
			}
			if tc.wantLog == "" && len(logged) > 0 || tc.wantLog != "" && (len(logged) != 1 || !strings.Contains(logged[0], tc.wantLog)) {
				t.Errorf("logged %q, want exactly one line naming %q", logged, tc.wantLog)
			}
			if _, err := c.PowerState(t.Context()); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestSessionExpiresMidRun: a 401 on an expired token re-logs in once and
// the request goes through; a second expiry is an error, not a loop.
func TestSessionExpiresMidRun(t *testing.T) {
	v, url := newVendorBMC(t, &vendorBMC{expireAfter: 8})
	c := vendorConnect(t, url, Config{})
	for i := range 6 {
		if _, err := c.PowerState(t.Context()); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if v.sessionsCreated != 2 {
		t.Errorf("%d sessions created, want 2 (one re-login)", v.sessionsCreated)
	}
	// A long run outlives more sessions: each expiry is one re-login.
	for i := range 20 {
		if _, err := c.PowerState(t.Context()); err != nil {
			t.Fatalf("call %d after the first re-login: %v", i, err)
		}
	}
	if v.sessionsCreated < 4 {
		t.Errorf("%d sessions created, want a re-login per expiry", v.sessionsCreated)
	}
	// A BMC that refuses fresh tokens gets one login attempt, not one per
	// request.
	v.mu.Lock()
	v.rejectTokens = true
	before := v.sessionsCreated
	v.mu.Unlock()
	for range 3 {
		if _, err := c.PowerState(t.Context()); statusOf(err) != http.StatusUnauthorized {
			t.Fatalf("err = %v, want the 401", err)
		}
	}
	if got := v.sessionsCreated - before; got != 1 {
		t.Errorf("%d logins after tokens stopped working, want 1", got)
	}
}

// TestVirtualMediaByPatch: slots without InsertMedia/EjectMedia, under
// Managers/ or Systems/, chosen by MediaTypes, set by PATCH with If-Match.
func TestVirtualMediaByPatch(t *testing.T) {
	for _, under := range []string{"/redfish/v1/Managers/1", "/redfish/v1/Systems/1"} {
		t.Run(under, func(t *testing.T) {
			v, url := newVendorBMC(t, &vendorBMC{mediaUnder: under, requireIfMatch: true})
			c := vendorConnect(t, url, Config{})
			if caps, _ := c.Capabilities(t.Context()); !caps.VirtualMediaCD {
				t.Fatal("CD slot not found")
			}
			const iso = "http://10.0.0.5:8080/blobs/sha256:ab/boot.iso"
			if err := c.InsertMedia(t.Context(), iso); err != nil {
				t.Fatal(err)
			}
			if !v.inserted || v.image != iso || !v.writeProtected {
				t.Errorf("after insert: inserted=%t image=%q wp=%t", v.inserted, v.image, v.writeProtected)
			}
			if m, err := c.Media(t.Context()); err != nil || !m.Inserted || m.Image != iso {
				t.Errorf("media %+v %v", m, err)
			}
			if err := c.EjectMedia(t.Context()); err != nil {
				t.Fatal(err)
			}
			if v.inserted || v.image != "" {
				t.Errorf("after eject: inserted=%t image=%q", v.inserted, v.image)
			}
		})
	}
}

// TestPatchRetriesStaleETag: a 412 to a stale ETag is retried with a fresh
// one (someone else changed the resource in between).
func TestPatchRetriesStaleETag(t *testing.T) {
	v, url := newVendorBMC(t, &vendorBMC{requireIfMatch: true})
	c := vendorConnect(t, url, Config{})
	stale := true
	c.hc.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPatch && stale {
			stale = false
			v.mu.Lock()
			v.etag++ // a concurrent writer
			v.mu.Unlock()
		}
		return http.DefaultTransport.RoundTrip(r)
	})
	if err := c.InsertMedia(t.Context(), "http://a/b.iso"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBootOverride(t.Context(), boot.Override{Target: boot.TargetPxe, Enabled: boot.EnabledOnce}); err != nil {
		t.Fatal(err)
	}
	if len(v.patches) != 2 {
		t.Errorf("patches applied %d, want 2", len(v.patches))
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestInsertMediaTransferParameters: a BMC that answers 400 naming
// TransferMethod gets the insert once more with TransferProtocolType and
// TransferMethod; a BMC that does not ask gets the plain body.
func TestInsertMediaTransferParameters(t *testing.T) {
	v, url := newVendorBMC(t, &vendorBMC{mediaActions: true, needTransfer: true})
	c := vendorConnect(t, url, Config{})
	if err := c.InsertMedia(t.Context(), "http://a/b.iso"); err != nil {
		t.Fatal(err)
	}
	if len(v.inserts) != 2 || v.inserts[1]["TransferMethod"] != "Stream" || v.inserts[1]["TransferProtocolType"] != "HTTP" {
		t.Errorf("inserts %v", v.inserts)
	}
	if !v.inserted {
		t.Error("not inserted")
	}
}

// TestResetNotRepeatedAfterLostAnswer: a BMC that acts on ForceRestart and
// then never answers in time must not get a second ForceRestart. Before:
// the POST was retried on the timeout, restarting the server twice.
func TestResetNotRepeatedAfterLostAnswer(t *testing.T) {
	v, url := newVendorBMC(t, &vendorBMC{resetHang: 2 * time.Second})
	c := vendorConnect(t, url, Config{HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}})
	err := c.Reset(t.Context(), "ForceRestart")
	if len(v.resets) != 1 {
		t.Fatalf("resets %v, want exactly one", v.resets)
	}
	if err != nil {
		t.Errorf("err = %v: the re-read LastResetTime shows the BMC acted", err)
	}
}

// TestResetRetriedWhenUnsent: a request that never reached the BMC (nothing
// listening) is retried; the error says so after the attempts.
func TestResetRetriedWhenUnsent(t *testing.T) {
	v, url := newVendorBMC(t, &vendorBMC{})
	c := vendorConnect(t, url, Config{})
	// Point the reset at a closed port: dialing fails, nothing is written.
	dead := "http://" + testutil.FreeAddr(t)
	var dials int
	c.hc.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Method == http.MethodPost {
			dials++
			r2 := r.Clone(r.Context())
			r2.URL.Host = strings.TrimPrefix(dead, "http://")
			return http.DefaultTransport.RoundTrip(r2)
		}
		return http.DefaultTransport.RoundTrip(r)
	})
	err := c.Reset(t.Context(), "ForceRestart")
	if err == nil || errors.Is(err, ErrMaybeActed) || dials != 3 || len(v.resets) != 0 {
		t.Errorf("err = %v, dials %d, resets %v: want 3 attempts, none reaching the BMC", err, dials, v.resets)
	}
}

// TestOverrideModeRequired: a BMC that does not report
// BootSourceOverrideMode yet refuses overrides without it (400 naming it)
// gets the override again with the mode, and every later one with it,
// the clearing Disabled included. Before: the 400 ended the boot.
func TestOverrideModeRequired(t *testing.T) {
	v, url := newVendorBMC(t, &vendorBMC{needMode: true})
	c := vendorConnect(t, url, Config{})
	if err := c.SetBootOverride(t.Context(), boot.Override{Target: boot.TargetPxe, Enabled: boot.EnabledOnce, Mode: "UEFI"}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetBootOverride(t.Context(), boot.Override{Target: boot.TargetNone, Enabled: boot.EnabledDisabled}); err != nil {
		t.Fatal(err)
	}
	if len(v.patches) != 2 {
		t.Fatalf("patches %v", v.patches)
	}
	for _, p := range v.patches {
		if p["Boot"].(map[string]any)["BootSourceOverrideMode"] != "UEFI" {
			t.Errorf("patch without the mode: %v", p)
		}
	}
}

// TestInstructionSet: the system's CPUs say the architecture; GPUs, FPGAs
// and empty sockets do not (bmcweb lists an absent CPU with Status.State
// Absent; metal-operator's mock has an FPGA with InstructionSet OEM).
func TestInstructionSet(t *testing.T) {
	cpu := func(typ, set, state string) map[string]any {
		p := map[string]any{"ProcessorType": typ, "Status": map[string]string{"State": state}}
		if set != "" {
			p["InstructionSet"] = set
		}
		return p
	}
	for _, tc := range []struct {
		name       string
		processors []map[string]any
		want       string
	}{
		{"no collection", nil, ""},
		{"empty collection", []map[string]any{}, ""},
		{"one CPU", []map[string]any{cpu("CPU", "x86-64", "Enabled")}, "x86-64"},
		{"FPGA first", []map[string]any{cpu("FPGA", "OEM", "Enabled"), cpu("CPU", "x86-64", "Enabled")}, "x86-64"},
		{"GPU, empty socket, ARM CPU", []map[string]any{cpu("GPU", "OEM", "Enabled"), cpu("CPU", "", "Absent"), cpu("CPU", "ARM-A64", "Enabled")}, "ARM-A64"},
		{"absent socket says nothing", []map[string]any{cpu("CPU", "x86-64", "Absent"), cpu("", "ARM-A64", "Enabled")}, "ARM-A64"},
		{"CPU without InstructionSet", []map[string]any{cpu("CPU", "", "Enabled")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, url := newVendorBMC(t, &vendorBMC{processors: tc.processors})
			c := vendorConnect(t, url, Config{})
			caps, err := c.Capabilities(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if caps.InstructionSet != tc.want {
				t.Errorf("InstructionSet %q, want %q", caps.InstructionSet, tc.want)
			}
		})
	}
}
