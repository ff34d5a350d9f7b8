package redfishemu

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzRequests feeds arbitrary bodies to every writable resource of every
// personality: the emulator parses outside bytes and must answer each with
// a status, never panic, and keep its state consistent (no image without
// inserted media).
func FuzzRequests(f *testing.F) {
	f.Add(0, 0, `{"Boot":{"BootSourceOverrideTarget":"Pxe","BootSourceOverrideEnabled":"Once"}}`)
	f.Add(1, 3, `{"Image":"http://a/i.iso","Inserted":true,"WriteProtected":true}`)
	f.Add(2, 1, `{"Image":"http://a/i.iso","TransferProtocolType":"HTTP"}`)
	f.Add(3, 2, `{"ResetType":"On"}`)
	f.Add(4, 4, `{"UserName":"admin","Password":"password"}`)
	f.Add(5, 5, `{"Image":null,"Inserted":false}`)
	f.Add(6, 1, `[`)
	targets := []struct{ method, path string }{
		{"PATCH", "/redfish/v1/Systems/1"},
		{"POST", "/Actions/VirtualMedia.InsertMedia"},
		{"POST", "/Actions/VirtualMedia.EjectMedia"},
		{"PATCH", ""},
		{"POST", "/redfish/v1/SessionService/Sessions"},
		{"POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset"},
	}
	f.Fuzz(func(t *testing.T, pi, ti int, body string) {
		p := Personalities[uint(pi)%uint(len(Personalities))]
		tg := targets[uint(ti)%uint(len(targets))]
		var o Options
		p.Apply(&o)
		e := New(o)
		path := tg.path
		if path == "" || strings.HasPrefix(path, "/Actions") {
			path = e.mediaCollection() + "/CD1" + path
		}
		req := httptest.NewRequest(tg.method, path, strings.NewReader(body))
		req.SetBasicAuth("admin", "password")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		if w.Code < 200 || w.Code >= 600 || http.StatusText(w.Code) == "" {
			t.Fatalf("%s %s %q: status %d", tg.method, path, body, w.Code)
		}
		if s := e.State(); s.MediaImage != "" && !s.MediaInserted {
			t.Errorf("image %q without inserted media", s.MediaImage)
		}
	})
}
