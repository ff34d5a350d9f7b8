package redfish

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stmcginnis/gofish/schemas"

	"github.com/ironcore-dev/os-builder/redfishemu"
)

// FuzzDecodeBMC feeds BMC response bytes to every decoder the client runs
// on them: the system, virtual media and collection documents, task
// (monitor) bodies, the service root, session and ActionInfo documents, and gofish's error body parser (schemas.ConstructError,
// which statusOf relies on). None may panic; reads go through the same
// bound as responses.
func FuzzDecodeBMC(f *testing.F) {
	for _, seed := range []string{
		`{"Id": "1", "Manufacturer": "Supermicro", "PowerState": "On", "Boot": {"BootSourceOverrideEnabled": "Once",
			"BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "UsbCd"], "BootSourceOverrideMode": "UEFI"},
			"Actions": {"#ComputerSystem.Reset": {"target": "/r"}}, "Links": {"ManagedBy": [{"@odata.id": "/m"}]}}`,
		`{"MediaTypes": ["CD", "DVD"], "Inserted": true, "Image": "http://x/y.iso", "Actions": {"#VirtualMedia.InsertMedia": {"target": "/i"}}}`,
		`{"Members": [{"@odata.id": "/redfish/v1/Systems/1"}]}`,
		`{"TaskState": "Exception", "TaskStatus": "Critical"}`,
		`{"error": {"code": "Base.1.0.GeneralError", "message": "busy", "@Message.ExtendedInfo": [{"MessageId": "x", "Message": "y"}]}}`,
		`{"Boot": {"BootSourceOverrideMode": null}}`,
		`{"@odata.id": "/redfish/v1/", "SessionService": {"@odata.id": "/redfish/v1/SessionService"}, "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}}}`,
		`{"@odata.id": "/redfish/v1/SessionService/Sessions/1", "UserName": "admin"}`,
		`{"Parameters": [{"Name": "Image", "Required": true}, {"Name": "TransferMethod", "AllowableValues": ["Stream", "Upload"]}]}`,
		`{"MediaTypes": ["CD"], "Image": null, "Actions": {"#VirtualMedia.InsertMedia": {"target": "/i", "@Redfish.ActionInfo": "/ai",
			"TransferProtocolType@Redfish.AllowableValues": ["HTTP", "HTTPS"], "TransferMethod@Redfish.AllowableValues": ["Stream"]}}}`,
		`{"LastResetTime": "2026-01-01T00:00:00+00:00", "PowerState": "Off"}`,
		`[`, ``, `null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		body := func() io.Reader { return &limitedBody{rc: io.NopCloser(bytes.NewReader(b)), left: maxBody} }
		var sys systemDoc
		_ = decodeBody(body(), &sys)
		var md mediaDoc
		_ = decodeBody(body(), &md)
		var coll struct{ Members []member }
		_ = decodeBody(body(), &coll)
		var root serviceRoot
		_ = decodeBody(body(), &root)
		var sess sessionDoc
		_ = decodeBody(body(), &sess)
		var ai actionInfo
		_ = decodeBody(body(), &ai)
		_ = taskFailed(taskState(body()))
		payload, _ := io.ReadAll(body())
		err := schemas.ConstructError(http.StatusServiceUnavailable, payload)
		if statusOf(err) != http.StatusServiceUnavailable {
			t.Fatalf("status of a 503 error: %d", statusOf(err))
		}
		_ = err.Error()
	})
}

// TestResponseBodyBounded: a BMC (or anything at its address) sending an
// endless or huge body is refused at maxBody, for resources and for error
// bodies alike, instead of being read into memory whole.
func TestResponseBodyBounded(t *testing.T) {
	emu := redfishemu.New(redfishemu.Options{})
	huge := strings.Repeat(" ", maxBody+1)
	var modeV atomic.Value
	modeV.Store("")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mode := modeV.Load().(string)
		switch {
		case mode == "chunked" && r.Method == http.MethodGet && r.URL.Path == "/redfish/v1/Systems/1":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			// No Content-Length: the body streams past the bound.
			for range 2 * maxBody / 4096 {
				if _, err := w.Write([]byte(strings.Repeat(" ", 4096))); err != nil {
					return
				}
			}
		case mode == "length" && r.URL.Path == "/redfish/v1/Systems/1":
			w.Header().Set("Content-Length", "1000000000")
			w.WriteHeader(http.StatusOK)
		case mode == "error" && r.URL.Path == "/redfish/v1/Systems/1":
			http.Error(w, huge, http.StatusInternalServerError)
		default:
			emu.ServeHTTP(w, r)
		}
	}))
	defer ts.Close()
	c, err := Connect(t.Context(), Config{Endpoint: ts.URL, Credentials: Credentials{Username: "admin", Password: "password"}, Retry: Retry{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, m := range []string{"chunked", "length", "error"} {
		modeV.Store(m)
		if _, err := c.PowerState(t.Context()); !errors.Is(err, ErrBodyTooLarge) {
			t.Errorf("%s: err = %v, want ErrBodyTooLarge", m, err)
		}
	}
}
