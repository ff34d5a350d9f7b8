package sources

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/ironcore-dev/os-builder/builder/programs"
)

// TestBuildInitSources: an InitSource in Options wins (what cmd/builder
// passes), and the manifest entry identifies the bytes and the toolchain
// of whichever init was used.
func TestBuildInitSources(t *testing.T) {
	carried := []byte("\x7fELF carried init")
	var log bytes.Buffer
	prebuilt := programs.PrebuiltInits{
		FS: fstest.MapFS{programs.PrebuiltInitName("arm64"): {Data: carried}}, From: "carried by the builder",
	}
	p, err := runInit(prebuilt, t.TempDir(), "arm64", logTo(&log))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); !bytes.Equal(got, carried) {
		t.Errorf("init %q", got)
	}
	if !strings.Contains(log.String(), "init: carried by the builder") {
		t.Errorf("log %q", log.String())
	}
	// The carried init's key is its bytes: other bytes, another key.
	key := func(data []byte) string {
		in, err := (&Init{arch: "arm64", src: programs.PrebuiltInits{FS: fstest.MapFS{programs.PrebuiltInitName("arm64"): {Data: data}}}}).Inputs()
		if err != nil {
			t.Fatal(err)
		}
		return in.Key()
	}
	if key(carried) == key(append(carried, 0)) {
		t.Error("the carried init's key does not follow its bytes")
	}
	info, err := InitInfo(p)
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
	p, err = runInit(nil, t.TempDir(), "amd64", logTo(&log))
	if err != nil {
		t.Fatal(err)
	}
	if info, err = InitInfo(p); err != nil || len(info.SHA256) != 64 || !strings.HasPrefix(info.GoVersion, "go1.") {
		t.Errorf("initInfo = %+v, %v", info, err)
	}
	if !strings.Contains(log.String(), "init: built from ") {
		t.Errorf("log %q", log.String())
	}
}

// runInit runs the init step the way a build does and returns the init.
func runInit(src programs.InitSource, out, arch string, logf func(string, ...any)) (string, error) {
	s := NewInit(arch, src, logf)
	if err := s.Run(context.Background(), out); err != nil {
		return "", err
	}
	return InitBinary(out), nil
}

// logTo is a log function writing lines into b.
func logTo(b *bytes.Buffer) func(string, ...any) {
	return func(format string, args ...any) { fmt.Fprintf(b, format+"\n", args...) }
}
