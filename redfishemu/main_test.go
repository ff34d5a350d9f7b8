package redfishemu

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestMainPersonality: --personality selects a preset; an unknown one is a
// usage error naming the known ones.
func TestMainPersonality(t *testing.T) {
	var stderr bytes.Buffer
	if code := Main(t.Context(), []string{"--personality", "hpe-nope"}, &stderr); code != 2 || !strings.Contains(stderr.String(), "dmtf-rackmount") {
		t.Errorf("unknown personality: exit %d, %q", code, stderr.String())
	}
	addr := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int)
	go func() {
		done <- Main(ctx, []string{"--listen", addr, "--personality", "dmtf-system-media"}, &bytes.Buffer{})
	}()
	defer func() { cancel(); <-done }()
	var resp *http.Response
	var err error
	for range 100 {
		req, _ := http.NewRequest("GET", "http://"+addr+sysCD, nil)
		req.SetBasicAuth("admin", "password")
		if resp, err = http.DefaultClient.Do(req); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var cd map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&cd)
	if _, actions := cd["Actions"]; resp.StatusCode != 200 || actions {
		t.Errorf("GET %s: %d %v, want 200 without Actions", sysCD, resp.StatusCode, cd)
	}
}
