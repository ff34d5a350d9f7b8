package redfish

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// originBMC is a minimal session-auth Redfish service whose Systems
// collection names the member it is told to, or redirects to where it is
// told to.
type originBMC struct {
	member   string // @odata.id of the one system
	redirect string // Location for GET /redfish/v1/Systems ("" : none)
}

const originToken = "token-for-the-bmc-only"

func (b *originBMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	reply := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	authed := r.Header.Get("X-Auth-Token") == originToken
	switch p := strings.TrimSuffix(r.URL.Path, "/"); {
	case p == "/redfish/v1":
		reply(map[string]any{"Links": map[string]any{"Sessions": map[string]string{"@odata.id": "/redfish/v1/SessionService/Sessions"}}})
	case p == "/redfish/v1/SessionService/Sessions" && r.Method == http.MethodPost:
		w.Header().Set("X-Auth-Token", originToken)
		w.Header().Set("Location", "/redfish/v1/SessionService/Sessions/1")
		w.WriteHeader(http.StatusCreated)
	case !authed:
		w.WriteHeader(http.StatusUnauthorized)
	case p == "/redfish/v1/Systems" && b.redirect != "":
		http.Redirect(w, r, b.redirect, http.StatusTemporaryRedirect)
	case p == "/redfish/v1/Systems", p == "/redfish/v1/Systems2":
		reply(map[string]any{"Members": []map[string]string{{"@odata.id": b.member}}})
	case p == "/redfish/v1/Systems/1":
		reply(map[string]any{"Id": "1", "PowerState": "On"})
	case p == "/redfish/v1/SessionService/Sessions/1" && r.Method == http.MethodDelete:
	default:
		http.NotFound(w, r)
	}
}

// elsewhere records what reaches a host that is not the BMC.
type elsewhere struct {
	mu     sync.Mutex
	hits   []string
	tokens []string
}

func (e *elsewhere) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hits = append(e.hits, r.Method+" "+r.URL.String())
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		e.tokens = append(e.tokens, tok)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"Id": "1", "Members": []}`))
}

// TestRequestsStayOnOrigin: paths come from the BMC's answers
// (@odata.id, action targets, Location) and were appended raw to the
// endpoint, so "@other-host/..." sent the session token to another host.
// Every path is now resolved against the endpoint and one that is not an
// absolute path on it is refused (ErrOffOrigin); a redirect to another
// origin is refused too (Go forwards the custom X-Auth-Token header on
// cross-host redirects). Nothing reaches the other host.
func TestRequestsStayOnOrigin(t *testing.T) {
	other := &elsewhere{}
	ots := httptest.NewServer(other)
	defer ots.Close()
	host := strings.TrimPrefix(ots.URL, "http://")
	tests := []struct {
		name      string
		bmc       originBMC
		offOrigin bool
	}{
		{"userinfo", originBMC{member: "@" + host + "/redfish/v1/Systems/1"}, true},
		{"scheme-relative", originBMC{member: "//" + host + "/redfish/v1/Systems/1"}, true},
		{"absolute URL", originBMC{member: "http://" + host + "/redfish/v1/Systems/1"}, true},
		{"no leading slash", originBMC{member: "redfish/v1/Systems/1"}, true},
		{"host suffix", originBMC{member: ".evil.example/redfish/v1/Systems/1"}, true},
		{"port", originBMC{member: ":1/redfish/v1/Systems/1"}, true},
		{"redirect elsewhere", originBMC{member: "/redfish/v1/Systems/1", redirect: ots.URL + "/redfish/v1/Systems"}, true},
		{"redirect scheme-relative", originBMC{member: "/redfish/v1/Systems/1", redirect: "//" + host + "/redfish/v1/Systems"}, true},
		{"same-origin redirect", originBMC{member: "/redfish/v1/Systems/1", redirect: "/redfish/v1/Systems2"}, false},
		{"plain path", originBMC{member: "/redfish/v1/Systems/1"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			other.mu.Lock()
			other.hits, other.tokens = nil, nil
			other.mu.Unlock()
			bmc := tc.bmc
			ts := httptest.NewServer(&bmc)
			defer ts.Close()
			c, err := Connect(t.Context(), Config{Endpoint: ts.URL, Credentials: Credentials{Username: "admin", Password: "pw"},
				Auth: AuthSession, Retry: Retry{Attempts: 2, Base: time.Millisecond}})
			if c != nil {
				c.Close()
			}
			if tc.offOrigin {
				if !errors.Is(err, ErrOffOrigin) {
					t.Errorf("Connect: %v, want ErrOffOrigin", err)
				}
			} else if err != nil {
				t.Errorf("Connect: %v", err)
			}
			other.mu.Lock()
			defer other.mu.Unlock()
			if len(other.tokens) > 0 || len(other.hits) > 0 {
				t.Errorf("another host got %q with tokens %q", other.hits, other.tokens)
			}
		})
	}
}
