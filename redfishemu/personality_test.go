package redfishemu

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// rawClient speaks plain HTTP to an emulator (basic auth unless token is
// set), so tests see status codes and headers as a client would.
type rawClient struct {
	t     *testing.T
	url   string
	token string
}

func newRaw(t *testing.T, o Options) (*Emulator, *rawClient) {
	t.Helper()
	e := New(o)
	ts := httptest.NewServer(e)
	t.Cleanup(ts.Close)
	return e, &rawClient{t: t, url: ts.URL}
}

func (c *rawClient) do(method, path string, body any, hdr ...string) (int, http.Header, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.url+path, rd)
	if c.token != "" {
		req.Header.Set("X-Auth-Token", c.token)
	} else {
		req.SetBasicAuth("admin", "password")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, resp.Header, m
}

func personality(t *testing.T, name string) Options {
	t.Helper()
	p, err := LookupPersonality(name)
	if err != nil {
		t.Fatal(err)
	}
	var o Options
	p.Apply(&o)
	return o
}

func TestLookupPersonality(t *testing.T) {
	if _, err := LookupPersonality("nope"); err == nil || !strings.Contains(err.Error(), "lenovo-xcc") {
		t.Errorf("unknown personality: %v", err)
	}
	seen := map[string]bool{}
	for _, p := range Personalities {
		if seen[p.Name] || p.Source == "" {
			t.Errorf("personality %q: duplicate or without source", p.Name)
		}
		seen[p.Name] = true
	}
}

const (
	mgrCD = "/redfish/v1/Managers/1/VirtualMedia/CD1"
	sysCD = "/redfish/v1/Systems/1/VirtualMedia/CD1"
)

// TestPersonalityMedia: where each personality's virtual CD lives, whether
// it has actions, and how it is inserted, as its source says.
func TestPersonalityMedia(t *testing.T) {
	iso := "http://a/image.iso"
	tests := []struct {
		personality string
		cd          string // the CD's path
		actions     bool
		postInsert  map[string]any // a body InsertMedia must accept (nil: POST refused)
		refused     []map[string]any
		refusal     string // in the refusals' message
	}{
		{"dmtf-rackmount", mgrCD, true, map[string]any{"Image": iso, "Inserted": true, "WriteProtected": true}, nil, ""},
		{"dmtf-system-media", sysCD, false, nil, nil, ""},
		{"lenovo-xcc", mgrCD, false, nil, nil, ""},
		{"supermicro", mgrCD, true, map[string]any{"Image": iso},
			[]map[string]any{{"Image": iso, "Inserted": true, "WriteProtected": true}}, "Inserted or WriteProtected"},
		{"transfer-params", mgrCD, true, map[string]any{"Image": iso, "TransferProtocolType": "HTTP", "TransferMethod": "Stream"},
			[]map[string]any{{"Image": iso}, {"Image": iso, "TransferProtocolType": "HTTP"}}, "Transfer"},
		{"sushy-emulator", sysCD, true, map[string]any{"Image": iso, "Inserted": true}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.personality, func(t *testing.T) {
			e, c := newRaw(t, personality(t, tc.personality))
			other := mgrCD
			if tc.cd == mgrCD {
				other = sysCD
			}
			if code, _, _ := c.do("GET", other, nil); code != 404 {
				t.Errorf("GET %s: %d, want 404", other, code)
			}
			code, hdr, cd := c.do("GET", tc.cd, nil)
			if code != 200 {
				t.Fatalf("GET %s: %d", tc.cd, code)
			}
			if _, ok := cd["Actions"]; ok != tc.actions {
				t.Errorf("Actions present = %t, want %t", ok, tc.actions)
			}
			for _, body := range tc.refused {
				code, _, m := c.do("POST", tc.cd+"/Actions/VirtualMedia.InsertMedia", body)
				if code != 400 || !strings.Contains(errMessage(m), tc.refusal) {
					t.Errorf("InsertMedia %v: %d %q, want 400 naming %q", body, code, errMessage(m), tc.refusal)
				}
			}
			if tc.postInsert == nil {
				if code, _, _ := c.do("POST", tc.cd+"/Actions/VirtualMedia.InsertMedia", map[string]any{"Image": iso}); code != 405 {
					t.Errorf("InsertMedia POST on a CD without actions: %d, want 405", code)
				}
				if code, _, _ := c.do("POST", tc.cd+"/Actions/VirtualMedia.EjectMedia", map[string]any{}); code != 405 {
					t.Errorf("EjectMedia POST on a CD without actions: %d, want 405", code)
				}
				code, _, _ = c.do("PATCH", tc.cd, map[string]any{"Image": iso, "Inserted": true, "WriteProtected": true}, "If-Match", hdr.Get("ETag"))
				if code != 204 {
					t.Fatalf("PATCH Image/Inserted: %d", code)
				}
			} else if code, _, m := c.do("POST", tc.cd+"/Actions/VirtualMedia.InsertMedia", tc.postInsert); code != 204 {
				t.Fatalf("InsertMedia %v: %d %s", tc.postInsert, code, errMessage(m))
			}
			if s := e.State(); !s.MediaInserted || s.MediaImage != iso {
				t.Errorf("after insert: %+v", s)
			}
			if tc.postInsert == nil {
				_, hdr, _ := c.do("GET", tc.cd, nil)
				if code, _, _ := c.do("PATCH", tc.cd, map[string]any{"Image": nil, "Inserted": false}, "If-Match", hdr.Get("ETag")); code != 204 {
					t.Fatalf("PATCH eject: %d", code)
				}
			} else if code, _, _ := c.do("POST", tc.cd+"/Actions/VirtualMedia.EjectMedia", map[string]any{}); code != 204 {
				t.Fatalf("EjectMedia: %d", code)
			}
			if s := e.State(); s.MediaInserted || s.MediaImage != "" {
				t.Errorf("after eject: %+v", s)
			}
		})
	}
}

func errMessage(m map[string]any) string {
	if e, ok := m["error"].(map[string]any); ok {
		s, _ := e["message"].(string)
		return s
	}
	return ""
}

// TestPersonalityHPE: iLO 4 has no UefiHttp target and wants a JSON body
// on EjectMedia.
func TestPersonalityHPE(t *testing.T) {
	_, c := newRaw(t, personality(t, "hpe-ilo4"))
	_, _, sys := c.do("GET", "/redfish/v1/Systems/1", nil)
	if targets := sys["Boot"].(map[string]any)["BootSourceOverrideTarget@Redfish.AllowableValues"].([]any); slices.Contains(targets, any("UefiHttp")) {
		t.Errorf("allowable targets %v include UefiHttp", targets)
	}
	if code, _, _ := c.do("POST", mgrCD+"/Actions/VirtualMedia.EjectMedia", nil); code != 415 {
		t.Errorf("EjectMedia without body: %d, want 415", code)
	}
	if code, _, _ := c.do("POST", mgrCD+"/Actions/VirtualMedia.EjectMedia", map[string]any{}); code != 204 {
		t.Errorf("EjectMedia {}: %d, want 204", code)
	}
}

// TestPersonalityIfMatch: lenovo-xcc answers 428 to a PATCH without
// If-Match and 412 to a stale one, on the system and on the media.
func TestPersonalityIfMatch(t *testing.T) {
	_, c := newRaw(t, personality(t, "lenovo-xcc"))
	for _, tc := range []struct {
		path string
		body map[string]any
	}{
		{"/redfish/v1/Systems/1", map[string]any{"Boot": map[string]any{"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}}},
		{mgrCD, map[string]any{"Image": "http://a/i.iso", "Inserted": true}},
	} {
		_, hdr, _ := c.do("GET", tc.path, nil)
		tag := hdr.Get("ETag")
		for _, step := range []struct {
			ifMatch string
			want    int
		}{{"", 428}, {`W/"999"`, 412}, {tag, 204}, {tag, 412}} {
			var h []string
			if step.ifMatch != "" {
				h = []string{"If-Match", step.ifMatch}
			}
			if code, _, _ := c.do("PATCH", tc.path, tc.body, h...); code != step.want {
				t.Errorf("PATCH %s If-Match %q: %d, want %d", tc.path, step.ifMatch, code, step.want)
			}
		}
	}
}

// TestPersonalityBoot: the override rules of each personality.
func TestPersonalityBoot(t *testing.T) {
	patch := func(c *rawClient, boot map[string]any) int {
		code, _, _ := c.do("PATCH", "/redfish/v1/Systems/1", map[string]any{"Boot": boot})
		return code
	}
	t.Run("supermicro", func(t *testing.T) {
		_, c := newRaw(t, personality(t, "supermicro"))
		if code := patch(c, map[string]any{"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once", "BootSourceOverrideMode": "UEFI"}); code != 400 {
			t.Errorf("Cd: %d, want 400 (UsbCd only)", code)
		}
		if code := patch(c, map[string]any{"BootSourceOverrideTarget": "UsbCd", "BootSourceOverrideEnabled": "Once"}); code != 400 {
			t.Errorf("without BootSourceOverrideMode: %d, want 400", code)
		}
		if code := patch(c, map[string]any{"BootSourceOverrideTarget": "UsbCd", "BootSourceOverrideEnabled": "Once", "BootSourceOverrideMode": "UEFI"}); code != 204 {
			t.Errorf("UsbCd with mode: %d, want 204", code)
		}
	})
	t.Run("once-only", func(t *testing.T) {
		e, c := newRaw(t, personality(t, "once-only"))
		if code := patch(c, map[string]any{"BootSourceOverrideTarget": "Hdd", "BootSourceOverrideEnabled": "Continuous"}); code != 400 {
			t.Errorf("Continuous: %d, want 400", code)
		}
		if code := patch(c, map[string]any{"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}); code != 204 {
			t.Fatalf("Once: %d", code)
		}
		e.PowerOn()
		e.SystemReset()
		if b := e.Boots(); len(b) != 2 || b[1].Target != "Pxe" {
			t.Errorf("the Once override should stick (firmware bug): boots %+v", b)
		}
	})
}

// TestPersonalitySessions: no-sessions has no SessionService but takes
// basic auth; short-sessions ends a session mid-run with 401.
func TestPersonalitySessions(t *testing.T) {
	_, c := newRaw(t, personality(t, "no-sessions"))
	if _, _, root := c.do("GET", "/redfish/v1", nil); root["SessionService"] != nil {
		t.Errorf("service root links a SessionService: %v", root)
	}
	if code, _, _ := c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]any{"UserName": "admin", "Password": "password"}); code != 404 && code != 405 {
		t.Errorf("session creation: %d, want 404/405", code)
	}
	if code, _, _ := c.do("GET", "/redfish/v1/Systems/1", nil); code != 200 {
		t.Errorf("basic auth: %d", code)
	}

	o := personality(t, "short-sessions")
	_, c = newRaw(t, o)
	_, hdr, _ := c.do("POST", "/redfish/v1/SessionService/Sessions", map[string]any{"UserName": "admin", "Password": "password"})
	c.token = hdr.Get("X-Auth-Token")
	for i := range o.SessionRequests {
		if code, _, _ := c.do("GET", "/redfish/v1/Systems/1", nil); code != 200 {
			t.Fatalf("request %d of the session: %d", i+1, code)
		}
	}
	if code, _, _ := c.do("GET", "/redfish/v1/Systems/1", nil); code != 401 {
		t.Errorf("after %d requests: %d, want 401 (session expired)", o.SessionRequests, code)
	}
}

// TestPersonalityAsync: async-tasks answers Reset and InsertMedia with 202
// and a task monitor; the media shows as inserted once the task completes.
func TestPersonalityAsync(t *testing.T) {
	o := personality(t, "async-tasks")
	e, c := newRaw(t, o)
	code, hdr, _ := c.do("POST", mgrCD+"/Actions/VirtualMedia.InsertMedia", map[string]any{"Image": "http://a/i.iso"})
	if code != 202 || hdr.Get("Location") == "" {
		t.Fatalf("InsertMedia: %d %q, want 202 + Location", code, hdr.Get("Location"))
	}
	mon := hdr.Get("Location")
	for i := 1; i < o.TaskPolls; i++ {
		if code, _, _ := c.do("GET", mon, nil); code != 202 {
			t.Fatalf("poll %d: %d, want 202", i, code)
		}
		if e.State().MediaInserted {
			t.Fatal("media inserted before the task completed")
		}
	}
	if code, _, body := c.do("GET", mon, nil); code != 200 || body["TaskState"] != "Completed" {
		t.Fatalf("last poll: %d %v", code, body)
	}
	if !e.State().MediaInserted {
		t.Error("media not inserted after the task completed")
	}
	if code, hdr, _ := c.do("POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", map[string]any{"ResetType": "On"}); code != 202 || hdr.Get("Location") == "" {
		t.Errorf("Reset: %d, want 202 + Location", code)
	}
	if e.Resets() != 1 {
		t.Errorf("resets %d", e.Resets())
	}
}

// TestPersonalityProcessors: the system links its Processors; the CPU
// reports the personality's InstructionSet (x86-64 by default), an empty
// socket only its Absent state.
func TestPersonalityProcessors(t *testing.T) {
	for _, tc := range []struct {
		personality string
		members     []string
		set         any // the present CPU's InstructionSet (nil: absent)
	}{
		{"dmtf-rackmount", []string{"CPU1"}, "x86-64"},
		{"openbmc-ampere", []string{"CPU0", "CPU1"}, "ARM-A64"},
		{"no-instruction-set", []string{"CPU1"}, nil},
	} {
		t.Run(tc.personality, func(t *testing.T) {
			_, c := newRaw(t, personality(t, tc.personality))
			if _, _, sys := c.do("GET", "/redfish/v1/Systems/1", nil); sys["Processors"] == nil {
				t.Fatal("system links no Processors")
			}
			_, _, coll := c.do("GET", "/redfish/v1/Systems/1/Processors", nil)
			ms, _ := coll["Members"].([]any)
			if len(ms) != len(tc.members) {
				t.Fatalf("members %v, want %v", ms, tc.members)
			}
			for i, id := range tc.members {
				if got := ms[i].(map[string]any)["@odata.id"]; got != "/redfish/v1/Systems/1/Processors/"+id {
					t.Errorf("member %d is %v, want %s", i, got, id)
				}
				code, _, p := c.do("GET", "/redfish/v1/Systems/1/Processors/"+id, nil)
				state := p["Status"].(map[string]any)["State"]
				switch {
				case code != 200 || p["ProcessorType"] != "CPU":
					t.Errorf("%s: %d %v", id, code, p)
				case id == "CPU0" && (state != "Absent" || p["InstructionSet"] != nil):
					t.Errorf("empty socket %v, want Absent without InstructionSet", p)
				case id == "CPU1" && (state != "Enabled" || p["InstructionSet"] != tc.set):
					t.Errorf("CPU %v, want Enabled with InstructionSet %v", p, tc.set)
				}
			}
		})
	}
}
