package metaloperator_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/ironcore-dev/metal-operator/bmc/mock/server"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/boot/artifacts"
	"github.com/ironcore-dev/os-builder/boot/cli"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
)

// TestServerbootAgainstMockBMC drives metal-operator's own mock Redfish
// server with os-builder's own client through the serverboot CLI, default
// auth (auto): `plan --bmc` and a PXE boot work, and the fallback to basic
// auth is said exactly once per command. The mock is run both ways it
// ships: open (its default: a session POST answers 201
// {"status":"created"} without X-Auth-Token, which was 8 retries and exit
// 1 before) and with WithAuth (the session POST itself needs basic auth:
// 401).
func TestServerbootAgainstMockBMC(t *testing.T) {
	image := pushImage(t, "uefi-http,pxe,virtual-media,disk", "uefi-http")
	ref, err := name.ParseReference(image, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	id, err := osimage.ReadIdentity(img)
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(t.TempDir(), "creds.json")
	if err := os.WriteFile(creds, []byte(`{"username": "`+mockUser+`", "password": "`+mockPassword+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		opts     []server.Option
		fallback string // the one stderr line
	}{
		{"open", nil, "redfish: the BMC answered the session request without a usable X-Auth-Token; using HTTP basic auth"},
		{"WithAuth", []server.Option{server.WithAuth()}, "redfish: the BMC refused a session (HTTP 401); using HTTP basic auth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMockWith(t, tc.opts...)
			m.reset()
			bmcURL := m.url("")
			listen := testutil.FreeAddr(t)
			cacheDir := filepath.Join(t.TempDir(), "cache")
			common := []string{"--bmc", bmcURL, "--image", image, "--insecure", "--credentials-file", creds,
				"--artifact-listen", listen, "--timeout", "45s"}

			start := time.Now()
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), append([]string{"plan"}, common...), &stdout, &stderr)
			if code != cli.ExitOK {
				t.Fatalf("plan: exit %d\nstderr: %s", code, stderr.String())
			}
			if !strings.Contains(stdout.String(), "method: pxe (image prefers uefi-http; BMC allows [Pxe Cd Usb Hdd") {
				t.Errorf("plan does not choose pxe by the mock's targets:\n%s", stdout.String())
			}
			if n := strings.Count(stderr.String(), tc.fallback); n != 1 {
				t.Errorf("plan: the fallback line appears %d times, want once\nstderr: %s", n, stderr.String())
			}
			t.Logf("plan in %s", time.Since(start).Round(time.Millisecond))

			// The machine: once the mock is powered on, it fetches the
			// iPXE script DHCP would hand it, which is the evidence the
			// boot waits for.
			script := pxeScriptURL(t, id, ref, "http://"+listen, cacheDir, bmcURL)
			fetched := make(chan int, 1)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			go func() { fetched <- firmwareFetch(ctx, m, script) }()

			start = time.Now()
			stdout.Reset()
			stderr.Reset()
			code = cli.Run(ctx, append([]string{"boot", "--artifact-cache-dir", cacheDir, "--serve-after-boot", "0s", "--evidence-timeout", "30s"}, common...), &stdout, &stderr)
			if code != cli.ExitOK {
				t.Fatalf("boot: exit %d\nstdout: %s\nstderr: %s", code, stdout.String(), stderr.String())
			}
			if n := strings.Count(stderr.String(), tc.fallback); n != 1 {
				t.Errorf("boot: the fallback line appears %d times, want once\nstderr: %s", n, stderr.String())
			}
			if status := <-fetched; status != http.StatusOK {
				t.Errorf("the machine's fetch of %s answered %d", script, status)
			}
			s := m.waitPower("On")
			if s.Boot.BootSourceOverrideTarget != "Hdd" || s.Boot.BootSourceOverrideEnabled != "Continuous" {
				t.Errorf("mock override %s/%s after a NetworkBootOnce boot, want Hdd/Continuous (disk pinned)", s.Boot.BootSourceOverrideTarget, s.Boot.BootSourceOverrideEnabled)
			}
			for _, want := range []string{"BootOverrideSet", "Booted                 True", "DiskPinned"} {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("boot conditions lack %q:\n%s", want, stdout.String())
				}
			}
			t.Logf("boot in %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

// pxeScriptURL is the iPXE script URL of the pxe plan serverboot makes: its
// base URL carries the boot token serverboot derives from the BMC URL and
// the image with the key in its cache directory.
func pxeScriptURL(t *testing.T, id *osimage.BootIdentity, ref name.Reference, advertise, cacheDir, bmcURL string) string {
	t.Helper()
	base, err := artifacts.BootURL(advertise, cacheDir, bmcURL+"\x00"+ref.String())
	if err != nil {
		t.Fatal(err)
	}
	p, err := boot.Resolve(id, boot.Request{Image: ref.String(), Method: osimage.BootPXE, ArtifactBaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Steps {
		if len(s.Scripts) > 0 {
			return s.Scripts[0].URL
		}
	}
	t.Fatal("pxe plan without iPXE script")
	return ""
}

// firmwareFetch waits for the mock's system to power on with a Pxe
// override, then fetches the script as iPXE would, and returns the status
// (0: never got an answer).
func firmwareFetch(ctx context.Context, m *mockBMC, script string) int {
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.url(mockSystemURI), nil)
		req.SetBasicAuth(mockUser, mockPassword)
		var s systemState
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = jsonDecode(resp, &s)
		}
		if s.PowerState == "On" && s.Boot.BootSourceOverrideTarget == "Pxe" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, script, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return resp.StatusCode
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}
