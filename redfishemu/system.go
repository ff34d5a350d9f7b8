package redfishemu

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

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
		"Links":      obj{"ManagedBy": []obj{link("/redfish/v1/Managers/1")}},
		"Processors": link("/redfish/v1/Systems/1/Processors"),
		// The DMTF schema's ProcessorSummary has no InstructionSet: a
		// client reads the Processors members for it.
		"ProcessorSummary": obj{"Count": 1},
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

// processorIDs are the members of Systems/1/Processors.
func (e *Emulator) processorIDs() []string {
	if e.opts.EmptySocketFirst {
		return []string{"CPU0", "CPU1"}
	}
	return []string{"CPU1"}
}

func (e *Emulator) getProcessors(w http.ResponseWriter, r *http.Request) {
	var ms []string
	for _, id := range e.processorIDs() {
		ms = append(ms, "/redfish/v1/Systems/1/Processors/"+id)
	}
	writeJSON(w, http.StatusOK, "", collection("/redfish/v1/Systems/1/Processors", ms...))
}

// getProcessor serves the CPU (and the empty socket before it): type,
// status and the instruction set the personality reports.
func (e *Emulator) getProcessor(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !slices.Contains(e.processorIDs(), id) {
		writeError(w, http.StatusNotFound, "Base.1.0.ResourceMissingAtURI", "no processor "+id)
		return
	}
	body := obj{"@odata.id": "/redfish/v1/Systems/1/Processors/" + id, "@odata.type": "#Processor.v1_18_0.Processor", "Id": id, "Name": "Processor",
		"ProcessorType": "CPU"}
	if id == "CPU0" {
		body["Status"] = obj{"State": "Absent"}
		writeJSON(w, http.StatusOK, "", body)
		return
	}
	body["Status"] = obj{"State": "Enabled", "Health": "OK"}
	if !e.opts.NoInstructionSet {
		body["InstructionSet"] = e.opts.InstructionSet
	}
	writeJSON(w, http.StatusOK, "", body)
}
