package redfishemu

import (
	"encoding/json"
	"net/http"
)

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
