package redfishemu

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (e *Emulator) authorized(r *http.Request) bool {
	p := strings.TrimSuffix(r.URL.Path, "/")
	if p == "/redfish/v1" || (r.Method == http.MethodPost && p == "/redfish/v1/SessionService/Sessions") {
		return true
	}
	if u, pw, ok := r.BasicAuth(); ok {
		return u == e.opts.Username && pw == e.opts.Password
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	tok := r.Header.Get("X-Auth-Token")
	s, ok := e.sessions[tok]
	if !ok {
		return false
	}
	s.used++
	if e.opts.SessionRequests > 0 && s.used > e.opts.SessionRequests {
		delete(e.sessions, tok) // expired: the client must log in again
		return false
	}
	return true
}

func (e *Emulator) createSession(w http.ResponseWriter, r *http.Request) {
	var req struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.0.MalformedJSON", err.Error())
		return
	}
	if req.UserName != e.opts.Username || req.Password != e.opts.Password {
		writeError(w, http.StatusUnauthorized, "Base.1.0.NoValidSession", "invalid credentials")
		return
	}
	e.mu.Lock()
	e.nextSess++
	id := strconv.Itoa(e.nextSess)
	tok := newToken()
	e.sessions[tok] = &session{id: id}
	e.mu.Unlock()
	loc := "/redfish/v1/SessionService/Sessions/" + id
	w.Header().Set("X-Auth-Token", tok)
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusCreated, "", obj{"@odata.id": loc, "Id": id, "Name": "Session", "UserName": req.UserName})
}

func (e *Emulator) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	e.mu.Lock()
	for tok, s := range e.sessions {
		if s.id == id {
			delete(e.sessions, tok)
		}
	}
	e.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// Sessions is the number of open sessions (logout tests).
func (e *Emulator) Sessions() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.sessions)
}
