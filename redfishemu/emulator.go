// Package redfishemu is a Redfish BMC emulator at the protocol tier: enough of
// ServiceRoot, SessionService, one ComputerSystem and one Manager with a
// virtual media CD slot to drive boots, with real Once semantics, ETags, and
// injectable faults and vendor quirks. It is an http.Handler; OnBoot lets a
// lower tier (QEMU) follow what the emulated system would boot.
package redfishemu

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// BootEvent is what the emulated system boots when it powers on or resets.
type BootEvent struct {
	// Target is the effective boot target: the override's when one is
	// active, else the first entry of the boot order (Hdd).
	Target      string
	HTTPBootURI string
	// MediaImage is the inserted virtual media image, if any.
	MediaImage string
}

// Options configure the emulator, its faults and vendor quirks.
type Options struct {
	Username, Password string // default admin/password
	// Manufacturer of the system and manager; "Supermicro" also switches
	// the virtual media boot target from Cd to UsbCd.
	Manufacturer string
	// RequireIfMatch answers 428 to a PATCH without If-Match.
	RequireIfMatch bool
	// FaultRate is the probability that a request (other than the session
	// logout) fails with 503, or a PATCH with 412 (stale ETag).
	FaultRate float64
	// FaultEveryN fails every Nth request with 503 (0: never).
	FaultEveryN int
	// Seed makes FaultRate reproducible.
	Seed uint64
	// InsertRequiresEject refuses InsertMedia while media is inserted.
	InsertRequiresEject bool
	// OnceAsContinuous keeps a Once override after boot (a buggy BMC).
	OnceAsContinuous bool
	// NoContinuous refuses BootSourceOverrideEnabled=Continuous.
	NoContinuous bool
	// NoUefiHttp leaves UefiHttp out of the allowable targets.
	NoUefiHttp bool
	// NoVirtualMedia removes the manager's virtual media.
	NoVirtualMedia bool
	// AsyncReset answers Reset with 202 + a task monitor that completes
	// after TaskPolls polls.
	AsyncReset bool
	TaskPolls  int

	// The knobs below model how vendors' BMCs differ; Personalities names
	// the combinations real BMCs show.

	// CdTarget is the boot target of the virtual CD: "Cd" (default) or
	// "UsbCd". Manufacturer "Supermicro" defaults it to "UsbCd".
	CdTarget string
	// MediaUnderSystem serves the virtual media under
	// Systems/1/VirtualMedia (linked from the system) instead of
	// Managers/1/VirtualMedia.
	MediaUnderSystem bool
	// MediaPatchOnly offers no InsertMedia/EjectMedia actions: a POST to
	// them is 405, and the media is changed by PATCHing Image, Inserted and
	// WriteProtected on the VirtualMedia resource.
	MediaPatchOnly bool
	// InsertNeedsTransfer refuses InsertMedia without TransferProtocolType
	// (400 ActionParameterMissing) and then without TransferMethod (400
	// GeneralError), as sushy's detection of these errors expects.
	InsertNeedsTransfer bool
	// InsertRejectsOptional refuses InsertMedia carrying Inserted or
	// WriteProtected (400 ActionParameterUnknown).
	InsertRejectsOptional bool
	// RequireOverrideMode refuses a Boot PATCH that sets the target or
	// enabled state without BootSourceOverrideMode (400 PropertyMissing).
	RequireOverrideMode bool
	// NoSessionService: no SessionService (404); only basic auth works.
	NoSessionService bool
	// SessionRequests ends a session after that many requests made with
	// it (0: never); later requests with its token get 401.
	SessionRequests int
	// EjectNeedsBody answers 415 to an EjectMedia POST without a JSON body.
	EjectNeedsBody bool
	// AsyncInsert answers InsertMedia (or the PATCH that inserts) with 202
	// + a task monitor, completing after TaskPolls polls; the media shows
	// as inserted only then.
	AsyncInsert bool
	// OnBoot is called, outside the emulator's lock, whenever the system
	// boots (power on, restart, power cycle).
	OnBoot func(BootEvent)
	// OnPowerOff is called, outside the emulator's lock, when the system
	// powers off (ForceOff, GracefulShutdown) while it was on.
	OnPowerOff func()
	// OnNew is called by New with the new emulator, so a lower tier
	// attached to these Options can report what the system does by itself
	// (SystemReset).
	OnNew func(*Emulator)
}

// CdBootTarget is the boot target of the virtual CD: CdTarget, else
// "UsbCd" for Supermicro, else "Cd".
func (o Options) CdBootTarget() string {
	switch {
	case o.CdTarget != "":
		return o.CdTarget
	case strings.EqualFold(o.Manufacturer, "Supermicro"):
		return "UsbCd"
	}
	return "Cd"
}

// Emulator is one emulated BMC.
type Emulator struct {
	opts     Options
	requests atomic.Int64
	faults   atomic.Int64
	mux      *http.ServeMux

	mu       sync.Mutex
	rng      *mrand.Rand
	sessions map[string]*session // token -> session
	nextSess int
	power    string
	boot     bootState
	media    mediaState
	version  int // bumped on every change; the ETag derives from it
	boots    []BootEvent
	tasks    map[string]*task
	resets   int // Reset actions received
}

type session struct {
	id   string
	used int
}

// task is a pending task monitor; done runs (under e.mu) when it completes.
type task struct {
	left int
	done func()
}

type bootState struct {
	Enabled, Target, Mode, HTTPBootURI string
}

type mediaState struct {
	Inserted, WriteProtected bool
	Image                    string
}

// New returns an emulator with the system powered off and no override.
func New(opts Options) *Emulator {
	if opts.Username == "" {
		opts.Username, opts.Password = "admin", "password"
	}
	if opts.Manufacturer == "" {
		opts.Manufacturer = "Contoso"
	}
	e := &Emulator{
		opts:     opts,
		rng:      mrand.New(mrand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)),
		sessions: map[string]*session{},
		power:    "Off",
		boot:     bootState{Enabled: "Disabled", Target: "None", Mode: "UEFI"},
		tasks:    map[string]*task{},
	}
	e.opts.CdTarget = opts.CdBootTarget()
	e.routes()
	if opts.OnNew != nil {
		opts.OnNew(e)
	}
	return e
}

// Requests counts every HTTP request received.
func (e *Emulator) Requests() int64 { return e.requests.Load() }

// Faults counts injected faults (503 and 412).
func (e *Emulator) Faults() int64 { return e.faults.Load() }

// Boots returns every boot so far.
func (e *Emulator) Boots() []BootEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.boots)
}

// Snapshot is the emulated system's state, for tests.
type Snapshot struct {
	PowerState                                                 string
	OverrideEnabled, OverrideTarget, OverrideMode, HTTPBootURI string
	MediaInserted, MediaWriteProtected                         bool
	MediaImage                                                 string
}

// State returns a snapshot of the system.
func (e *Emulator) State() Snapshot {
	e.mu.Lock()
	defer e.mu.Unlock()
	return Snapshot{e.power, e.boot.Enabled, e.boot.Target, e.boot.Mode, e.boot.HTTPBootURI, e.media.Inserted, e.media.WriteProtected, e.media.Image}
}

// PowerOn boots the system as if someone pressed the power button (or a
// reboot happened outside the driver): the override, if any, applies.
func (e *Emulator) PowerOn() {
	e.mu.Lock()
	ev := e.bootLocked()
	e.mu.Unlock()
	e.fire(ev)
}

// SystemReset is a reset the system does by itself (the OS rebooting, a
// watchdog): if the system is on it boots again, the override in effect
// applying as at a ForceRestart (a consumed Once no longer does), and OnBoot
// fires. A system that is off stays off. It reports whether it booted.
func (e *Emulator) SystemReset() bool {
	e.mu.Lock()
	if e.power != "On" {
		e.mu.Unlock()
		return false
	}
	ev := e.bootLocked()
	e.mu.Unlock()
	e.fire(ev)
	return true
}

// Resets counts the Reset actions received (a non-idempotent action a
// driver must send exactly once per boot).
func (e *Emulator) Resets() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.resets
}

func (e *Emulator) allowedTargets() []string {
	t := []string{"None", "Pxe", "Hdd", "BiosSetup", e.opts.CdTarget}
	if !e.opts.NoUefiHttp {
		t = append(t, "UefiHttp")
	}
	return t
}

func (e *Emulator) etag() string { return fmt.Sprintf(`W/"%d"`, e.version) }

// bootLocked performs a boot: powers on, computes the effective target,
// consumes a Once override.
func (e *Emulator) bootLocked() BootEvent {
	e.power = "On"
	ev := BootEvent{Target: "Hdd"}
	if e.boot.Enabled != "Disabled" && e.boot.Target != "None" {
		ev.Target = e.boot.Target
		if ev.Target == "UefiHttp" {
			ev.HTTPBootURI = e.boot.HTTPBootURI
		}
	}
	if e.media.Inserted {
		ev.MediaImage = e.media.Image
	}
	if e.boot.Enabled == "Once" && !e.opts.OnceAsContinuous {
		e.boot.Enabled, e.boot.Target = "Disabled", "None"
	}
	e.version++
	e.boots = append(e.boots, ev)
	return ev
}

func (e *Emulator) fire(ev BootEvent) {
	if e.opts.OnBoot != nil {
		e.opts.OnBoot(ev)
	}
}

func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ServeHTTP counts the request, injects faults, checks auth and routes.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := e.requests.Add(1)
	logout := r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/redfish/v1/SessionService/Sessions/")
	if !logout && r.URL.Path != "/redfish/v1" && r.URL.Path != "/redfish/v1/" {
		if e.opts.FaultEveryN > 0 && n%int64(e.opts.FaultEveryN) == 0 {
			e.faults.Add(1)
			writeError(w, http.StatusServiceUnavailable, "Base.1.0.ServiceTemporarilyUnavailable", "injected fault: BMC busy")
			return
		}
		if e.opts.FaultRate > 0 {
			e.mu.Lock()
			hit := e.rng.Float64() < e.opts.FaultRate
			stale := hit && r.Method == http.MethodPatch && e.rng.IntN(2) == 0
			if stale {
				e.version++ // someone else changed the resource
			}
			e.mu.Unlock()
			if hit {
				e.faults.Add(1)
			}
			if stale {
				writeError(w, http.StatusPreconditionFailed, "Base.1.0.PreconditionFailed", "injected fault: ETag does not match")
				return
			}
			if hit {
				w.Header().Set("Retry-After", "0")
				writeError(w, http.StatusServiceUnavailable, "Base.1.0.ServiceTemporarilyUnavailable", "injected fault: BMC busy")
				return
			}
		}
	}
	if !e.authorized(r) {
		writeError(w, http.StatusUnauthorized, "Base.1.0.NoValidSession", "authentication required")
		return
	}
	e.mux.ServeHTTP(w, r)
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

func (e *Emulator) routes() {
	m := http.NewServeMux()
	m.HandleFunc("GET /redfish/v1", e.serviceRoot)
	m.HandleFunc("GET /redfish/v1/{$}", e.serviceRoot)
	if !e.opts.NoSessionService {
		m.HandleFunc("GET /redfish/v1/SessionService", func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, "", obj{"@odata.id": "/redfish/v1/SessionService", "Id": "SessionService", "Name": "Session Service",
				"Sessions": link("/redfish/v1/SessionService/Sessions")})
		})
		m.HandleFunc("POST /redfish/v1/SessionService/Sessions", e.createSession)
		m.HandleFunc("DELETE /redfish/v1/SessionService/Sessions/{id}", e.deleteSession)
	}
	m.HandleFunc("GET /redfish/v1/Systems", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, "", collection("/redfish/v1/Systems", "/redfish/v1/Systems/1"))
	})
	m.HandleFunc("GET /redfish/v1/Systems/1", e.getSystem)
	m.HandleFunc("PATCH /redfish/v1/Systems/1", e.patchSystem)
	m.HandleFunc("POST /redfish/v1/Systems/1/Actions/ComputerSystem.Reset", e.reset)
	m.HandleFunc("GET /redfish/v1/Managers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, "", collection("/redfish/v1/Managers", "/redfish/v1/Managers/1"))
	})
	m.HandleFunc("GET /redfish/v1/Managers/1", e.getManager)
	if !e.opts.NoVirtualMedia {
		coll := e.mediaCollection()
		m.HandleFunc("GET "+coll, func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, "", collection(coll, coll+"/CD1"))
		})
		m.HandleFunc("GET "+coll+"/CD1", e.getMedia)
		m.HandleFunc("PATCH "+coll+"/CD1", e.patchMedia)
		m.HandleFunc("POST "+coll+"/CD1/Actions/VirtualMedia.InsertMedia", e.insertMedia)
		m.HandleFunc("POST "+coll+"/CD1/Actions/VirtualMedia.EjectMedia", e.ejectMedia)
	}
	m.HandleFunc("GET /redfish/v1/TaskService/TaskMonitors/{id}", e.taskMonitor)
	e.mux = m
}

// mediaCollection is where the virtual media lives: under the manager, or
// under the system.
func (e *Emulator) mediaCollection() string {
	if e.opts.MediaUnderSystem {
		return "/redfish/v1/Systems/1/VirtualMedia"
	}
	return "/redfish/v1/Managers/1/VirtualMedia"
}

type obj = map[string]any

func link(p string) obj { return obj{"@odata.id": p} }

func collection(self string, members ...string) obj {
	ms := []obj{}
	for _, m := range members {
		ms = append(ms, link(m))
	}
	return obj{"@odata.id": self, "Name": "Collection", "Members": ms, "Members@odata.count": len(ms)}
}

func (e *Emulator) serviceRoot(w http.ResponseWriter, r *http.Request) {
	body := obj{
		"@odata.id": "/redfish/v1", "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot", "Id": "RootService", "Name": "Root Service",
		"RedfishVersion": "1.15.0", "Vendor": e.opts.Manufacturer,
		"Systems": link("/redfish/v1/Systems"), "Managers": link("/redfish/v1/Managers"),
		"Links": obj{},
	}
	if !e.opts.NoSessionService {
		body["SessionService"] = link("/redfish/v1/SessionService")
		body["Links"] = obj{"Sessions": link("/redfish/v1/SessionService/Sessions")}
	}
	writeJSON(w, http.StatusOK, "", body)
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

func (e *Emulator) getSystem(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	enabledAllowed := []string{"Disabled", "Once", "Continuous"}
	if e.opts.NoContinuous {
		enabledAllowed = []string{"Disabled", "Once"}
	}
	body := obj{
		"@odata.id": "/redfish/v1/Systems/1", "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem", "Id": "1", "Name": "System",
		"Manufacturer": e.opts.Manufacturer, "PowerState": e.power,
		"Boot": obj{
			"BootSourceOverrideEnabled":                         e.boot.Enabled,
			"BootSourceOverrideEnabled@Redfish.AllowableValues": enabledAllowed,
			"BootSourceOverrideTarget":                          e.boot.Target,
			"BootSourceOverrideTarget@Redfish.AllowableValues":  e.allowedTargets(),
			"BootSourceOverrideMode":                            e.boot.Mode,
			"HttpBootUri":                                       e.boot.HTTPBootURI,
			"BootOrder":                                         []string{"Boot0001", "Boot0002"},
		},
		"Actions": obj{"#ComputerSystem.Reset": obj{
			"target":                            "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
			"ResetType@Redfish.AllowableValues": []string{"On", "ForceOff", "ForceRestart", "GracefulShutdown", "PowerCycle"},
		}},
		"Links": obj{"ManagedBy": []obj{link("/redfish/v1/Managers/1")}},
	}
	if e.opts.MediaUnderSystem && !e.opts.NoVirtualMedia {
		body["VirtualMedia"] = link(e.mediaCollection())
	}
	tag := e.etag()
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, tag, body)
}

// patchSystem accepts a Boot object with only the properties to change.
func (e *Emulator) patchSystem(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Boot *struct {
			BootSourceOverrideEnabled *string
			BootSourceOverrideTarget  *string
			BootSourceOverrideMode    *string
			HttpBootUri               *string //nolint:revive // Redfish spelling
		}
	}
	if !decodeStrict(w, r, &req) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.checkIfMatch(w, r) {
		return
	}
	if req.Boot == nil {
		writeError(w, http.StatusBadRequest, "Base.1.0.PropertyMissing", "only Boot can be patched")
		return
	}
	if e.opts.RequireOverrideMode && req.Boot.BootSourceOverrideMode == nil &&
		(req.Boot.BootSourceOverrideTarget != nil || req.Boot.BootSourceOverrideEnabled != nil) {
		writeError(w, http.StatusBadRequest, "Base.1.0.PropertyMissing", "BootSourceOverrideMode is required with BootSourceOverrideTarget/Enabled")
		return
	}
	b := e.boot
	if v := req.Boot.BootSourceOverrideTarget; v != nil {
		if !slices.Contains(e.allowedTargets(), *v) {
			writeError(w, http.StatusBadRequest, "Base.1.0.PropertyValueNotInList", fmt.Sprintf("BootSourceOverrideTarget %q not allowed", *v))
			return
		}
		b.Target = *v
	}
	if v := req.Boot.BootSourceOverrideEnabled; v != nil {
		if !slices.Contains([]string{"Disabled", "Once", "Continuous"}, *v) || (*v == "Continuous" && e.opts.NoContinuous) {
			writeError(w, http.StatusBadRequest, "Base.1.0.PropertyValueNotInList", fmt.Sprintf("BootSourceOverrideEnabled %q not supported", *v))
			return
		}
		b.Enabled = *v
	}
	if v := req.Boot.BootSourceOverrideMode; v != nil {
		if *v != "UEFI" && *v != "Legacy" {
			writeError(w, http.StatusBadRequest, "Base.1.0.PropertyValueNotInList", fmt.Sprintf("BootSourceOverrideMode %q", *v))
			return
		}
		b.Mode = *v
	}
	if v := req.Boot.HttpBootUri; v != nil {
		b.HTTPBootURI = *v
	}
	e.boot = b
	e.version++
	w.Header().Set("ETag", e.etag())
	w.WriteHeader(http.StatusNoContent)
}

// checkIfMatch enforces If-Match; callers hold e.mu.
func (e *Emulator) checkIfMatch(w http.ResponseWriter, r *http.Request) bool {
	im := r.Header.Get("If-Match")
	if im == "" {
		if e.opts.RequireIfMatch {
			writeError(w, http.StatusPreconditionRequired, "Base.1.0.PreconditionRequired", "If-Match required")
			return false
		}
		return true
	}
	if im != "*" && im != e.etag() {
		writeError(w, http.StatusPreconditionFailed, "Base.1.0.PreconditionFailed", "ETag does not match")
		return false
	}
	return true
}

func (e *Emulator) reset(w http.ResponseWriter, r *http.Request) {
	var req struct{ ResetType string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.0.MalformedJSON", err.Error())
		return
	}
	e.mu.Lock()
	e.resets++
	var ev *BootEvent
	poweredOff := false
	switch req.ResetType {
	case "On":
		if e.power == "Off" {
			b := e.bootLocked()
			ev = &b
		}
	case "ForceOff", "GracefulShutdown":
		poweredOff = e.power == "On"
		e.power = "Off"
		e.version++
	case "ForceRestart", "PowerCycle":
		if e.power == "Off" && req.ResetType == "ForceRestart" {
			e.mu.Unlock()
			writeError(w, http.StatusConflict, "Base.1.0.ActionNotSupported", "system is off")
			return
		}
		b := e.bootLocked()
		ev = &b
	default:
		e.mu.Unlock()
		writeError(w, http.StatusBadRequest, "Base.1.0.ActionParameterValueNotInList", "unknown ResetType "+req.ResetType)
		return
	}
	var task string
	if e.opts.AsyncReset {
		task = e.newTaskLocked(nil)
	}
	e.mu.Unlock()
	if ev != nil {
		e.fire(*ev)
	}
	if poweredOff && e.opts.OnPowerOff != nil {
		e.opts.OnPowerOff()
	}
	if task != "" {
		writeTaskAccepted(w, task)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// newTaskLocked starts a task monitor that completes after TaskPolls polls
// and then runs done (under e.mu); callers hold e.mu.
func (e *Emulator) newTaskLocked(done func()) string {
	id := newToken()[:8]
	e.tasks[id] = &task{left: max(e.opts.TaskPolls, 1), done: done}
	return id
}

func writeTaskAccepted(w http.ResponseWriter, id string) {
	w.Header().Set("Location", "/redfish/v1/TaskService/TaskMonitors/"+id)
	writeJSON(w, http.StatusAccepted, "", obj{"TaskState": "Running"})
}

func (e *Emulator) taskMonitor(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	e.mu.Lock()
	t, ok := e.tasks[id]
	left := 0
	if ok {
		t.left--
		left = t.left
		if left == 0 && t.done != nil {
			t.done()
			t.done = nil
			e.version++
		}
	}
	e.mu.Unlock()
	switch {
	case !ok:
		http.NotFound(w, r)
	case left > 0:
		w.Header().Set("Location", r.URL.Path)
		writeJSON(w, http.StatusAccepted, "", obj{"TaskState": "Running"})
	default:
		writeJSON(w, http.StatusOK, "", obj{"TaskState": "Completed", "TaskStatus": "OK"})
	}
}

func (e *Emulator) getManager(w http.ResponseWriter, r *http.Request) {
	body := obj{"@odata.id": "/redfish/v1/Managers/1", "@odata.type": "#Manager.v1_17_0.Manager", "Id": "1", "Name": "BMC",
		"Manufacturer": e.opts.Manufacturer, "ManagerType": "BMC"}
	if !e.opts.NoVirtualMedia && !e.opts.MediaUnderSystem {
		body["VirtualMedia"] = link(e.mediaCollection())
	}
	writeJSON(w, http.StatusOK, "", body)
}

func (e *Emulator) getMedia(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	self := e.mediaCollection() + "/CD1"
	body := obj{"@odata.id": self, "@odata.type": "#VirtualMedia.v1_6_0.VirtualMedia", "Id": "CD1", "Name": "Virtual CD",
		"MediaTypes": []string{"CD", "DVD"}, "Inserted": e.media.Inserted, "Image": e.media.Image, "WriteProtected": e.media.WriteProtected,
		"ConnectedVia": map[bool]string{true: "URI", false: "NotConnected"}[e.media.Inserted]}
	if !e.opts.MediaPatchOnly {
		base := self + "/Actions/VirtualMedia."
		body["Actions"] = obj{"#VirtualMedia.InsertMedia": obj{"target": base + "InsertMedia"}, "#VirtualMedia.EjectMedia": obj{"target": base + "EjectMedia"}}
	}
	tag := e.etag()
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, tag, body)
}

// patchMedia is the Redfish way to change media on a VirtualMedia resource
// without actions: PATCH Image, Inserted, WriteProtected. Image null or
// Inserted false ejects (and forgets the image).
func (e *Emulator) patchMedia(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Image                *string
		Inserted             *bool
		WriteProtected       *bool
		TransferMethod       *string
		TransferProtocolType *string
	}
	if !decodeStrict(w, r, &req) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.checkIfMatch(w, r) {
		return
	}
	m := e.media
	if req.Image != nil {
		m.Image = *req.Image
	}
	if req.WriteProtected != nil {
		m.WriteProtected = *req.WriteProtected
	}
	if req.Inserted != nil {
		m.Inserted = *req.Inserted
	}
	if m.Image == "" || !m.Inserted { // Image null/"" or Inserted false ejects
		m = mediaState{}
	}
	if m.Inserted && e.media.Inserted && m.Image != e.media.Image && e.opts.InsertRequiresEject {
		writeError(w, http.StatusConflict, "Base.1.0.ResourceInUse", "media already inserted; eject first")
		return
	}
	if e.opts.AsyncInsert && m.Inserted && !e.media.Inserted {
		id := e.newTaskLocked(func() { e.media = m })
		writeTaskAccepted(w, id)
		return
	}
	e.media = m
	e.version++
	w.Header().Set("ETag", e.etag())
	w.WriteHeader(http.StatusNoContent)
}

func (e *Emulator) insertMedia(w http.ResponseWriter, r *http.Request) {
	if e.opts.MediaPatchOnly {
		w.Header().Set("Allow", "GET, PATCH")
		writeError(w, http.StatusMethodNotAllowed, "Base.1.0.ActionNotSupported", "VirtualMedia.InsertMedia is not supported; PATCH Image and Inserted")
		return
	}
	var req struct {
		Image                string
		Inserted             *bool
		WriteProtected       *bool
		TransferMethod       string
		TransferProtocolType string
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Image == "" {
		writeError(w, http.StatusBadRequest, "Base.1.0.ActionParameterMissing", "Image required")
		return
	}
	if e.opts.InsertRejectsOptional && (req.Inserted != nil || req.WriteProtected != nil) {
		writeError(w, http.StatusBadRequest, "Base.1.0.ActionParameterUnknown", "InsertMedia does not take Inserted or WriteProtected")
		return
	}
	if e.opts.InsertNeedsTransfer {
		if req.TransferProtocolType == "" {
			writeErrorRelated(w, http.StatusBadRequest, "Base.1.0.ActionParameterMissing",
				"The action InsertMedia requires the parameter TransferProtocolType", "#/TransferProtocolType")
			return
		}
		if req.TransferMethod == "" {
			writeError(w, http.StatusBadRequest, "Base.1.0.GeneralError", "TransferMethod is required")
			return
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.media.Inserted && e.opts.InsertRequiresEject {
		writeError(w, http.StatusConflict, "Base.1.0.ResourceInUse", "media already inserted; eject first")
		return
	}
	m := mediaState{Inserted: req.Inserted == nil || *req.Inserted, WriteProtected: req.WriteProtected == nil || *req.WriteProtected, Image: req.Image}
	if e.opts.AsyncInsert {
		writeTaskAccepted(w, e.newTaskLocked(func() { e.media = m }))
		return
	}
	e.media = m
	e.version++
	w.WriteHeader(http.StatusNoContent)
}

func (e *Emulator) ejectMedia(w http.ResponseWriter, r *http.Request) {
	if e.opts.MediaPatchOnly {
		w.Header().Set("Allow", "GET, PATCH")
		writeError(w, http.StatusMethodNotAllowed, "Base.1.0.ActionNotSupported", "VirtualMedia.EjectMedia is not supported; PATCH Inserted false")
		return
	}
	if e.opts.EjectNeedsBody {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeError(w, http.StatusUnsupportedMediaType, "Base.1.0.UnsupportedMediaType", "EjectMedia needs a JSON body ({})")
			return
		}
	}
	e.mu.Lock()
	e.media = mediaState{}
	e.version++
	e.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func writeJSON(w http.ResponseWriter, code int, etag string, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("OData-Version", "4.0")
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, id, msg string) {
	writeErrorRelated(w, code, id, msg)
}

// writeErrorRelated is a Redfish error whose extended info names the
// properties it is about (RelatedProperties, JSON pointers).
func writeErrorRelated(w http.ResponseWriter, code int, id, msg string, related ...string) {
	info := obj{"MessageId": id, "Message": msg}
	if len(related) > 0 {
		info["RelatedProperties"] = related
	}
	writeJSON(w, code, "", obj{"error": obj{"code": id, "message": msg, "@Message.ExtendedInfo": []obj{info}}})
}

// decodeStrict decodes a PATCH body into v, answering 400 PropertyUnknown
// for a property the resource does not let clients set (a client sending
// back the whole object it read is a bug real BMCs refuse too).
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "Base.1.0.PropertyUnknown", err.Error())
		return false
	}
	return true
}
