package redfish

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/boot"
	"github.com/ironcore-dev/os-builder/redfishemu"
)

func TestCredentialsNeverPrinted(t *testing.T) {
	c := Credentials{Username: "admin", Password: "s3cret-pw"}
	for _, s := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprintf("%v", Config{Credentials: c})} {
		if strings.Contains(s, "s3cret-pw") {
			t.Errorf("password printed: %s", s)
		}
	}
	p := filepath.Join(t.TempDir(), "creds")
	if err := os.WriteFile(p, []byte(`{"username": "admin", "password": "s3cret-pw"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CredentialsFromFile(p); err == nil || strings.Contains(err.Error(), "s3cret-pw") {
		t.Errorf("err = %v", err)
	}
	t.Setenv(EnvUsername, "u")
	t.Setenv(EnvPassword, "p")
	if c, err := CredentialsFromEnv(); err != nil || c.Username != "u" || c.Password != "p" {
		t.Errorf("env: %v %v", c, err)
	}
}

func TestQuirksFor(t *testing.T) {
	tests := []struct {
		manufacturer     string
		allowed, enabled []string
		wantCd, wantMode string
		wantNoContinuous bool
	}{
		{"Contoso", nil, nil, "Cd", "", false},
		{"Supermicro", nil, nil, "UsbCd", "always", false},
		{"Supermicro Computer Inc.", []string{"Pxe", "UsbCd"}, nil, "UsbCd", "always", false},
		// Detection wins: an unknown vendor advertising only UsbCd.
		{"Other", []string{"Pxe", "UsbCd"}, []string{"Disabled", "Once"}, "UsbCd", "", true},
	}
	for _, tc := range tests {
		q := QuirksFor(tc.manufacturer).refine(tc.allowed, tc.enabled)
		if q.VirtualMediaTarget != tc.wantCd || q.SendOverrideMode != tc.wantMode || q.NoContinuous != tc.wantNoContinuous {
			t.Errorf("%s: %+v", tc.manufacturer, q)
		}
	}
}

func TestRejectsBadEndpointAndCredentials(t *testing.T) {
	if _, err := Connect(t.Context(), Config{Endpoint: "bmc.example"}); err == nil {
		t.Error("endpoint without scheme accepted")
	}
	ts := httptest.NewServer(redfishemu.New(redfishemu.Options{}))
	defer ts.Close()
	_, err := Connect(t.Context(), Config{Endpoint: ts.URL, Credentials: Credentials{Username: "admin", Password: "nope"},
		Retry: Retry{Attempts: 2, Base: time.Millisecond}})
	if err == nil || strings.Contains(err.Error(), "nope") {
		t.Errorf("err = %v", err)
	}
}

func TestSupermicroVirtualMediaTarget(t *testing.T) {
	emu := redfishemu.New(redfishemu.Options{Manufacturer: "Supermicro", RequireIfMatch: true})
	ts := httptest.NewServer(emu)
	defer ts.Close()
	c, err := Connect(t.Context(), Config{Endpoint: ts.URL, Credentials: Credentials{Username: "admin", Password: "password"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	caps, _ := c.Capabilities(t.Context())
	found := false
	for _, tg := range caps.AllowedTargets {
		found = found || tg == boot.TargetCd
	}
	if !found {
		t.Errorf("Cd not reported (mapped from UsbCd): %v", caps.AllowedTargets)
	}
	if err := c.SetBootOverride(t.Context(), boot.Override{Target: boot.TargetCd, Enabled: boot.EnabledOnce, Mode: "UEFI"}); err != nil {
		t.Fatal(err)
	}
	if s := emu.State(); s.OverrideTarget != "UsbCd" || s.OverrideMode != "UEFI" {
		t.Errorf("state %+v", s)
	}
	o, _ := c.BootOverride(t.Context())
	if o.Target != boot.TargetCd {
		t.Errorf("override read back as %s", o.Target)
	}
}
