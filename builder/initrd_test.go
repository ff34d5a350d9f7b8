package builder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ironcore-dev/os-builder/initrd"
)

// TestBuildInitSources: an InitSource in Options wins (what cmd/builder
// passes), and the manifest entry identifies the bytes and the toolchain
// of whichever init was used.
func TestBuildInitSources(t *testing.T) {
	carried := []byte("\x7fELF carried init")
	var log bytes.Buffer
	p, err := buildInit(context.Background(), initrd.PrebuiltInits{
		FS: fstest.MapFS{initrd.PrebuiltInitName("arm64"): {Data: carried}}, From: "carried by the builder",
	}, t.TempDir(), "arm64", NewReporter(&log, false))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, carried) {
		t.Errorf("init %q", got)
	}
	if !strings.Contains(log.String(), "init: carried by the builder") {
		t.Errorf("log %q", log.String())
	}
	info, err := initInfo(p)
	sum := sha256.Sum256(carried)
	if err != nil || info.SHA256 != hex.EncodeToString(sum[:]) || info.GoVersion != "" {
		t.Errorf("initInfo = %+v, %v", info, err)
	}

	if testing.Short() {
		return
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain")
	}
	// nil: built from this source tree, with the toolchain on record.
	log.Reset()
	p, err = buildInit(context.Background(), nil, t.TempDir(), "amd64", NewReporter(&log, false))
	if err != nil {
		t.Fatal(err)
	}
	if info, err = initInfo(p); err != nil || len(info.SHA256) != 64 || !strings.HasPrefix(info.GoVersion, "go1.") {
		t.Errorf("initInfo = %+v, %v", info, err)
	}
	if !strings.Contains(log.String(), "init: built from ") {
		t.Errorf("log %q", log.String())
	}
}
