package redfishemu

import (
	"encoding/json"
	"net/http"
	"strings"
)

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
	m.HandleFunc("GET /redfish/v1/Systems/1/Processors", e.getProcessors)
	m.HandleFunc("GET /redfish/v1/Systems/1/Processors/{id}", e.getProcessor)
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
