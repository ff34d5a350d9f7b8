package redfishemu

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"
)

func connect(t *testing.T, e *Emulator, basic bool) *gofish.APIClient {
	t.Helper()
	ts := httptest.NewServer(e)
	t.Cleanup(ts.Close)
	c, err := gofish.Connect(gofish.ClientConfig{Endpoint: ts.URL, Username: "admin", Password: "password", BasicAuth: basic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Logout)
	return c
}

func system(t *testing.T, c *gofish.APIClient) *schemas.ComputerSystem {
	t.Helper()
	ss, err := c.Service.Systems()
	if err != nil || len(ss) != 1 {
		t.Fatalf("systems: %v %d", err, len(ss))
	}
	return ss[0]
}

// TestOnceSemantics drives the emulator with gofish's own typed API: a Once
// override applies to exactly one boot.
func TestOnceSemantics(t *testing.T) {
	for _, basic := range []bool{false, true} {
		var events []BootEvent
		e := New(Options{OnBoot: func(ev BootEvent) { events = append(events, ev) }})
		c := connect(t, e, basic)
		sys := system(t, c)
		if err := sys.SetBoot(&schemas.Boot{BootSourceOverrideTarget: schemas.UefiHTTPBootSource,
			BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled, HTTPBootURI: "http://a/uki.efi"}); err != nil {
			t.Fatal(err)
		}
		if _, err := sys.Reset(schemas.OnResetType); err != nil {
			t.Fatal(err)
		}
		sys = system(t, c)
		if sys.Boot.BootSourceOverrideEnabled != schemas.DisabledBootSourceOverrideEnabled || sys.PowerState != "On" {
			t.Errorf("after boot: %+v %s", sys.Boot, sys.PowerState)
		}
		if _, err := sys.Reset(schemas.ForceRestartResetType); err != nil {
			t.Fatal(err)
		}
		want := []BootEvent{{Target: "UefiHttp", HTTPBootURI: "http://a/uki.efi"}, {Target: "Hdd"}}
		if !slices.Equal(events, want) {
			t.Errorf("basic=%t events %+v, want %+v", basic, events, want)
		}
	}
}

func TestVirtualMedia(t *testing.T) {
	e := New(Options{InsertRequiresEject: true})
	c := connect(t, e, false)
	ms, err := c.Service.Managers()
	if err != nil {
		t.Fatal(err)
	}
	vms, err := ms[0].VirtualMedia()
	if err != nil || len(vms) != 1 {
		t.Fatalf("virtual media: %v", err)
	}
	vm := vms[0]
	yes := true
	insert := func(image string) error {
		_, err := vm.InsertMedia(&schemas.VirtualMediaInsertMediaParameters{Image: image, Inserted: &yes, WriteProtected: &yes})
		return err
	}
	if err := insert("http://a/image.iso"); err != nil {
		t.Fatal(err)
	}
	if err := insert("http://a/other.iso"); err == nil {
		t.Error("second insert without eject accepted")
	}
	if _, err := vm.EjectMedia(); err != nil {
		t.Fatal(err)
	}
	if err := insert("http://a/other.iso"); err != nil {
		t.Fatal(err)
	}
	if s := e.State(); !s.MediaInserted || s.MediaImage != "http://a/other.iso" || !s.MediaWriteProtected {
		t.Errorf("state %+v", s)
	}
}

// TestPatchPreconditions covers the ETag rules with raw HTTP.
func TestPatchPreconditions(t *testing.T) {
	e := New(Options{RequireIfMatch: true})
	ts := httptest.NewServer(e)
	defer ts.Close()
	get := func() string {
		req, _ := http.NewRequest("GET", ts.URL+"/redfish/v1/Systems/1", nil)
		req.SetBasicAuth("admin", "password")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("ETag")
	}
	patch := func(ifMatch string, body any) int {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("PATCH", ts.URL+"/redfish/v1/Systems/1", bytes.NewReader(b))
		req.SetBasicAuth("admin", "password")
		if ifMatch != "" {
			req.Header.Set("If-Match", ifMatch)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	ok := map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}}
	tag := get()
	tests := []struct {
		name    string
		ifMatch string
		body    any
		want    int
	}{
		{"missing If-Match", "", ok, 428},
		{"stale ETag", `W/"999"`, ok, 412},
		{"read-only property sent back", tag, map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Pxe"}, "PowerState": "On"}, 400},
		{"target not allowed", tag, map[string]any{"Boot": map[string]string{"BootSourceOverrideTarget": "Floppy"}}, 400},
		{"current ETag", tag, ok, 204},
		{"reused ETag is stale now", tag, ok, 412},
	}
	for _, tc := range tests {
		if got := patch(tc.ifMatch, tc.body); got != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestQuirks(t *testing.T) {
	e := New(Options{Manufacturer: "Supermicro", NoUefiHttp: true, NoVirtualMedia: true, FaultEveryN: 1000})
	c := connect(t, e, false)
	sys := system(t, c)
	if sys.Manufacturer != "Supermicro" {
		t.Errorf("manufacturer %q", sys.Manufacturer)
	}
	if err := sys.SetBoot(&schemas.Boot{BootSourceOverrideTarget: "UsbCd", BootSourceOverrideEnabled: "Once"}); err != nil {
		t.Errorf("UsbCd refused: %v", err)
	}
	if err := sys.SetBoot(&schemas.Boot{BootSourceOverrideTarget: schemas.UefiHTTPBootSource}); err == nil {
		t.Error("UefiHttp accepted without support")
	}
	ms, _ := c.Service.Managers()
	if vms, err := ms[0].VirtualMedia(); err == nil && len(vms) > 0 {
		t.Errorf("virtual media present: %d", len(vms))
	}
}

func TestUnauthenticated(t *testing.T) {
	ts := httptest.NewServer(New(Options{}))
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/redfish/v1/Systems/1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("status %d, want 401", resp.StatusCode)
	}
	if _, err := gofish.Connect(gofish.ClientConfig{Endpoint: ts.URL, Username: "admin", Password: "wrong"}); err == nil {
		t.Error("wrong password accepted")
	}
}

// TestPowerHooks: a lower tier learns of every boot and of power-off, but
// not of a ForceOff while already off.
func TestPowerHooks(t *testing.T) {
	var events []string
	e := New(Options{
		OnBoot:     func(ev BootEvent) { events = append(events, "boot "+ev.Target) },
		OnPowerOff: func() { events = append(events, "off") },
	})
	sys := system(t, connect(t, e, false))
	for _, rt := range []schemas.ResetType{schemas.OnResetType, schemas.ForceRestartResetType, schemas.ForceOffResetType, schemas.ForceOffResetType} {
		if _, err := sys.Reset(rt); err != nil {
			t.Fatalf("%s: %v", rt, err)
		}
	}
	if want := []string{"boot Hdd", "boot Hdd", "off"}; !slices.Equal(events, want) {
		t.Errorf("events = %q, want %q", events, want)
	}
}

// TestSystemReset: a reset the system does by itself boots again only while
// it is on, and a consumed Once override no longer applies.
func TestSystemReset(t *testing.T) {
	var events []BootEvent
	var self *Emulator
	e := New(Options{OnBoot: func(ev BootEvent) { events = append(events, ev) }, OnNew: func(e *Emulator) { self = e }})
	if self != e {
		t.Fatal("OnNew did not get the emulator")
	}
	if e.SystemReset() || len(events) != 0 {
		t.Fatalf("a system that is off reset itself: %+v", events)
	}
	sys := system(t, connect(t, e, true))
	if err := sys.SetBoot(&schemas.Boot{BootSourceOverrideTarget: schemas.PxeBootSource,
		BootSourceOverrideEnabled: schemas.OnceBootSourceOverrideEnabled}); err != nil {
		t.Fatal(err)
	}
	if _, err := sys.Reset(schemas.OnResetType); err != nil {
		t.Fatal(err)
	}
	if !e.SystemReset() {
		t.Fatal("SystemReset of a running system did not boot")
	}
	if _, err := sys.Reset(schemas.ForceOffResetType); err != nil {
		t.Fatal(err)
	}
	if e.SystemReset() {
		t.Error("SystemReset booted after ForceOff")
	}
	if want := []BootEvent{{Target: "Pxe"}, {Target: "Hdd"}}; !slices.Equal(events, want) {
		t.Errorf("events %+v, want %+v", events, want)
	}
	if got := e.Boots(); len(got) != 2 {
		t.Errorf("boots %+v", got)
	}
}
