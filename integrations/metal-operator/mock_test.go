package metaloperator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/ironcore-dev/metal-operator/bmc/mock/server"

	"github.com/ironcore-dev/os-builder/osimage"
)

// The mock's one system, its UUID and the credentials of its embedded
// AccountService (bmc/mock/server/data).
const (
	mockSystemURI  = "/redfish/v1/Systems/437XR1138R2"
	mockSystemUUID = "38947555-7742-3448-3784-823347823834"
	mockUser       = "admin"
	mockPassword   = "adminpass"
)

// mockBMC is metal-operator's own mock Redfish server, started for one test
// with Basic Auth enforced, as metal-operator's controller suite runs it.
type mockBMC struct {
	t    testing.TB
	host string
	port int32
}

func startMock(t testing.TB) *mockBMC {
	t.Helper()
	return startMockWith(t, server.WithAuth())
}

// startMockWith starts the mock with opts; without WithAuth it accepts
// every request, as it does by default.
func startMockWith(t testing.TB, opts ...server.Option) *mockBMC {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().(*net.TCPAddr)
	l.Close() // the mock listens itself (Start takes an address)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.NewMockServer(logr.Discard(), addr.String(), opts...).Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	m := &mockBMC{t: t, host: "127.0.0.1", port: int32(addr.Port)}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(m.url("/redfish/v1/"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("mock Redfish server on %s did not come up: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (m *mockBMC) url(path string) string {
	return fmt.Sprintf("http://%s:%d%s", m.host, m.port, path)
}

func (m *mockBMC) do(method, path string, body any) {
	m.t.Helper()
	var r *bytes.Reader
	b, _ := json.Marshal(body)
	r = bytes.NewReader(b)
	req, _ := http.NewRequest(method, m.url(path), r)
	req.SetBasicAuth(mockUser, mockPassword)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		m.t.Fatalf("%s %s: %s", method, path, resp.Status)
	}
}

// systemState is what the assertions look at: the mock's own resource.
type systemState struct {
	PowerState string
	Boot       struct {
		BootSourceOverrideEnabled string
		BootSourceOverrideTarget  string
		BootSourceOverrideMode    string
	}
}

func (m *mockBMC) system() systemState {
	m.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, m.url(mockSystemURI), nil)
	req.SetBasicAuth(mockUser, mockPassword)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		m.t.Fatal(err)
	}
	var s systemState
	if err := jsonDecode(resp, &s); err != nil {
		m.t.Fatal(err)
	}
	return s
}

// jsonDecode decodes and closes a response body.
func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitPower waits for the mock's asynchronous power transition (it settles
// 50-100 ms after a reset was accepted).
func (m *mockBMC) waitPower(want string) systemState {
	m.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := m.system()
		if s.PowerState == want {
			return s
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("mock system power state %q, want %q", s.PowerState, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// reset puts the mock into a known state unlike what any boot leaves: off,
// no boot override.
func (m *mockBMC) reset() {
	m.t.Helper()
	m.do(http.MethodPatch, mockSystemURI, map[string]any{"Boot": map[string]any{
		"BootSourceOverrideEnabled": "Disabled", "BootSourceOverrideTarget": "None"}})
	if m.system().PowerState != "Off" {
		m.do(http.MethodPost, mockSystemURI+"/Actions/ComputerSystem.Reset", map[string]any{"ResetType": "ForceOff"})
		m.waitPower("Off")
	}
}

// pushImage pushes mustImage to an in-process OCI registry and returns its
// reference by digest.
func pushImage(t testing.TB, methods, def string) string {
	t.Helper()
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	img := mustImage(t, methods, def)
	ref, err := name.ParseReference(strings.TrimPrefix(reg.URL, "http://") + "/os/node:test")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref.Context().Digest(d.String()).String()
}

// mustImage is an os-builder-style boot image: one small layer per artifact,
// titled like the builder's files, with the boot annotations.
func mustImage(t testing.TB, methods, def string) v1.Image {
	t.Helper()
	layers := []struct{ mt, title string }{
		{osimage.MediaTypeUKI, "uki.efi"}, {osimage.MediaTypeKernel, "vmlinuz"}, {osimage.MediaTypeInitramfs, "initrd.img"},
		{osimage.MediaTypeISO, "image.iso"}, {osimage.MediaTypeDisk, "disk.raw"},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	for i, l := range layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer(bytes.Repeat([]byte{byte('a' + i)}, 1000+i), types.MediaType(l.mt)),
			MediaType: types.MediaType(l.mt), Annotations: map[string]string{osimage.AnnotationTitle: l.title}})
		if err != nil {
			t.Fatal(err)
		}
	}
	img = mutate.Annotations(img, map[string]string{osimage.AnnotationBootMethods: methods,
		osimage.AnnotationBootDefault: def, osimage.AnnotationCmdline: "console=ttyS0"}).(v1.Image)
	return img
}
