package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/boot/redfish"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/redfishemu"
)

// pushUKIImage pushes an image offering uefi-http and disk.
func pushUKIImage(t *testing.T) string {
	t.Helper()
	ref, _ := pushCountedUKIImage(t)
	return ref
}

// pushCountedUKIImage is pushUKIImage whose registry counts the requests
// it gets after the push.
func pushCountedUKIImage(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	hits := &atomic.Int64{}
	regh := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		regh.ServeHTTP(w, r)
	}))
	t.Cleanup(reg.Close)
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	for _, l := range []struct{ mt, title string }{{osimage.MediaTypeUKI, "uki.efi"}, {osimage.MediaTypeDisk, "disk.raw"}} {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{Layer: static.NewLayer([]byte(l.title+" bytes"), types.MediaType(l.mt)),
			MediaType: types.MediaType(l.mt), Annotations: map[string]string{osimage.AnnotationTitle: l.title}})
		if err != nil {
			t.Fatal(err)
		}
	}
	img = mutate.Annotations(img, map[string]string{osimage.AnnotationBootMethods: "uefi-http,disk", osimage.AnnotationBootDefault: "uefi-http"}).(v1.Image)
	ref := strings.TrimPrefix(reg.URL, "http://") + "/os/uki:1"
	testutil.PushImage(t, ref, img)
	hits.Store(0)
	return ref, hits
}

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestExitCodes(t *testing.T) {
	ref := pushUKIImage(t)
	t.Setenv(redfish.EnvUsername, "admin")
	t.Setenv(redfish.EnvPassword, "password")
	listen := testutil.FreeAddr(t)
	// The emulated firmware fetches what the system boots, as a machine would.
	emu := redfishemu.New(redfishemu.Options{OnBoot: func(ev redfishemu.BootEvent) {
		if ev.HTTPBootURI != "" {
			if resp, err := http.Get(ev.HTTPBootURI); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}})
	bmc := httptest.NewServer(emu)
	defer bmc.Close()
	dead := httptest.NewServer(nil)
	dead.Close()
	// Each command takes only its own flags: plan the image ones, boot
	// those and --cache-dir, status the BMC ones.
	planFlags := []string{"--image", ref, "--insecure-registry", "--artifact-listen", listen}
	common := append(planFlags[:len(planFlags):len(planFlags)], "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	unreachable := testutil.FreeAddr(t) // nothing listens: a registry that is down
	state := t.TempDir() + "/state.json"
	badState := t.TempDir() + "/bad.json"
	if err := os.WriteFile(badState, []byte(`{"planDigest": "sha256:`+strings.Repeat("0", 64)+`", "done": -1}`), 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		args     []string
		want     int
		contains string
	}{
		{"no image", []string{"plan"}, ExitUsage, "--image is required"},
		{"bad flag", []string{"plan", "--nope"}, ExitUsage, "unknown flag"},
		{"unknown command", []string{"frobnicate"}, ExitUsage, "unknown command"},
		{"plan", append([]string{"plan"}, planFlags...), ExitOK, ""},
		{"plan takes no --cache-dir", append([]string{"plan"}, common...), ExitUsage, "unknown flag: --cache-dir"},
		{"eject takes no --image", []string{"eject", "--bmc", bmc.URL, "--image", ref}, ExitUsage, "unknown flag: --image"},
		{"status takes no --method", []string{"status", "--bmc", bmc.URL, "--method", "pxe"}, ExitUsage, "unknown flag: --method"},
		{"registry unreachable", []string{"plan", "--image", unreachable + "/os/uki:1", "--insecure-registry", "--artifact-listen", listen}, ExitBMC, "connection refused"},
		{"mismatch", append([]string{"boot", "--bmc", bmc.URL, "--method", "pxe"}, common...), ExitMismatch, "image offers no kernel+initrd for pxe: it has disk, uki"},
		{"install mismatch", append([]string{"boot", "--bmc", bmc.URL, "--install", "disk", "--install-target", "serial:osb-disk0"}, common...), ExitMismatch,
			"install mode disk (target serial:osb-disk0) needs kernel+initrd-noroot+disk in the image, missing kernel, initrd-noroot: it has disk, uki"},
		{"install without target", append([]string{"plan", "--install", "disk"}, planFlags...), ExitUsage, "needs a target disk selector"},
		{"invalid state", append([]string{"boot", "--bmc", bmc.URL, "--state", badState}, common...), ExitUsage, "invalid boot state: done = -1, must not be negative"},
		{"bmc down", append([]string{"boot", "--bmc", dead.URL, "--method", "disk", "--timeout", "3s"}, common...), ExitBMC, "connecting to BMC"},
		{"boot uefi-http", append([]string{"boot", "--bmc", bmc.URL, "--state", state, "--serve-after-boot", "0s", "--evidence-timeout", "10s"}, common...), ExitOK, ""},
		{"boot again: nothing to do", append([]string{"boot", "--bmc", bmc.URL, "--state", state, "--serve-after-boot", "1m", "--timeout", "20s"}, common...), ExitOK, "nothing to do"},
		{"status", []string{"status", "--bmc", bmc.URL, "--state", state, "--json"}, ExitOK, ""},
		{"eject", []string{"eject", "--bmc", bmc.URL}, ExitOK, ""},
	}
	for _, tc := range tests {
		before := emu.Requests()
		code, out, errOut := run(t, tc.args...)
		if code != tc.want || !strings.Contains(errOut+out, tc.contains) {
			t.Errorf("%s: exit %d, want %d; stdout %q stderr %q", tc.name, code, tc.want, out, errOut)
		}
		if (strings.Contains(tc.name, "mismatch") || tc.name == "invalid state") && emu.Requests() != before {
			t.Errorf("mismatch made %d BMC requests", emu.Requests()-before)
		}
		if tc.name == "status" {
			var st struct {
				Override   boot.Override
				Conditions []boot.Condition
			}
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatal(err)
			}
			// NetworkBootOnce pinned disk after the HTTP boot.
			if st.Override.Target != "Hdd" || len(st.Conditions) == 0 {
				t.Errorf("status %s", out)
			}
		}
	}
	if b := emu.Boots(); len(b) != 1 || b[0].Target != "UefiHttp" {
		t.Errorf("boots %+v", b)
	}
}

// TestTimeoutBoundsBMCCommands: status and eject against a BMC that
// accepts connections and never answers end at --timeout with exit code 5.
func TestTimeoutBoundsBMCCommands(t *testing.T) {
	t.Setenv(redfish.EnvUsername, "admin")
	t.Setenv(redfish.EnvPassword, "password")
	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) })
	for _, cmd := range []string{"status", "eject"} {
		t.Run(cmd, func(t *testing.T) {
			done := make(chan struct{})
			var code int
			var errOut string
			start := time.Now()
			go func() {
				defer close(done)
				code, _, errOut = run(t, cmd, "--bmc", hung.URL, "--timeout", "500ms")
			}()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatalf("%s still running 15s after a 500ms --timeout", cmd)
			}
			if code != ExitTimeout || !strings.Contains(errOut, "deadline") {
				t.Errorf("exit %d, want %d; stderr %q", code, ExitTimeout, errOut)
			}
			if took := time.Since(start); took > 3*time.Second {
				t.Errorf("took %s for a 500ms --timeout", took)
			}
		})
	}
}

// TestMethodAutoAndAuth: --method auto (the default) chooses by what the BMC
// allows and says why; nothing fitting, or a forced method the BMC cannot
// do, exits 3 naming the missing capability; --auth is checked.
func TestMethodAutoAndAuth(t *testing.T) {
	ref := pushUKIImage(t)
	t.Setenv(redfish.EnvUsername, "admin")
	t.Setenv(redfish.EnvPassword, "password")
	full := httptest.NewServer(redfishemu.New(redfishemu.Options{}))
	defer full.Close()
	noHTTP := httptest.NewServer(redfishemu.New(redfishemu.Options{NoUefiHttp: true}))
	defer noHTTP.Close()
	common := []string{"--image", ref, "--insecure-registry", "--artifact-advertise", "http://10.0.0.5:8080"}
	tests := []struct {
		name     string
		args     []string
		want     int
		contains string
	}{
		{"auto first choice", []string{"plan", "--bmc", full.URL}, ExitOK, "method: uefi-http (image's first choice; BMC allows ["},
		{"auto nothing fits", []string{"plan", "--bmc", noHTTP.URL}, ExitMismatch,
			"no boot method fits: the image offers [uefi-http], the BMC allows ["},
		{"auto nothing fits names the capability", []string{"plan", "--bmc", noHTTP.URL, "--method", "auto"}, ExitMismatch,
			"(uefi-http: BMC offers no UefiHttp boot target (allows ["},
		{"forced refuses", []string{"boot", "--bmc", noHTTP.URL, "--method", "uefi-http"}, ExitMismatch,
			"method uefi-http: BMC capability: BMC offers no UefiHttp boot target (allows ["},
		{"auth basic", []string{"plan", "--bmc", full.URL, "--auth", "basic"}, ExitOK, "method: uefi-http"},
		{"basic-auth alias", []string{"plan", "--bmc", full.URL, "--basic-auth"}, ExitOK, "method: uefi-http"},
		{"auth session", []string{"plan", "--bmc", full.URL, "--auth", "session"}, ExitOK, "method: uefi-http"},
		{"auth unknown", []string{"plan", "--bmc", full.URL, "--auth", "kerberos"}, ExitUsage, `unknown auth "kerberos"`},
	}
	for _, tc := range tests {
		code, out, errOut := run(t, append(tc.args, common...)...)
		if code != tc.want || !strings.Contains(errOut+out, tc.contains) {
			t.Errorf("%s: exit %d, want %d containing %q; stdout %q stderr %q", tc.name, code, tc.want, tc.contains, out, errOut)
		}
	}
}

// TestArtifactListenBoundBeforeBoot: an --artifact-listen address that
// cannot be bound fails the boot before the server is powered or reset
// (it used to be bound in the background while the BMC was driven).
func TestArtifactListenBoundBeforeBoot(t *testing.T) {
	ref := pushUKIImage(t)
	t.Setenv(redfish.EnvUsername, "admin")
	t.Setenv(redfish.EnvPassword, "password")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	emu := redfishemu.New(redfishemu.Options{})
	bmc := httptest.NewServer(emu)
	defer bmc.Close()
	code, out, errOut := run(t, "boot", "--bmc", bmc.URL, "--image", ref, "--insecure-registry",
		"--artifact-listen", taken.Addr().String(), "--cache-dir", filepath.Join(t.TempDir(), "cache"), "--timeout", "20s")
	if code == ExitOK || !strings.Contains(errOut, "address already in use") {
		t.Errorf("exit %d, stdout %q stderr %q; want a failure naming the bound address", code, out, errOut)
	}
	if r := emu.Resets(); r != 0 {
		t.Errorf("the BMC got %d resets before the artifact server could listen", r)
	}
	if b := emu.Boots(); len(b) != 0 {
		t.Errorf("the server booted %+v without an artifact server", b)
	}
}

// TestAdvertiseURL: the URL machines fetch from, derived from the listen
// address when not given; IPv6 literals come out bracketed, and a
// link-local listen address (only reachable with this host's zone) needs
// an explicit --artifact-advertise.
func TestAdvertiseURL(t *testing.T) {
	for _, tc := range []struct {
		listen, advertise, want, wantErr string
	}{
		{listen: "10.0.0.5:8080", want: "http://10.0.0.5:8080"},
		{listen: "[fd00:db8::5]:8080", want: "http://[fd00:db8::5]:8080"},
		{listen: "[::]:8080", advertise: "http://[fd00:db8::5]:8080", want: "http://[fd00:db8::5]:8080"},
		{listen: "[::]:8080", wantErr: "binds all addresses"},
		{listen: ":8080", wantErr: "binds all addresses"},
		{listen: "[fe80::1%eth0]:8080", wantErr: "link-local (fe80::1%eth0)"},
		{listen: "[fe80::1]:8080", wantErr: "link-local (fe80::1)"},
		{listen: "fd00::5:8080", wantErr: "too many colons"},
	} {
		o := &options{listen: tc.listen, advertise: tc.advertise}
		got, err := o.advertiseURL()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("listen %s: %q, %v; want error %q", tc.listen, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("listen %s: %q, %v; want %q", tc.listen, got, err, tc.want)
		}
	}
}
