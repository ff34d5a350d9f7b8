package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// TestInterruptExits130: builder exits 130 on Ctrl-C, as serverboot does (one
// table, internal/exitcode). The test runs itself as a child that hangs on
// a registry that never answers, and interrupts it.
func TestInterruptExits130(t *testing.T) {
	if args := os.Getenv("OSB_BUILDER_CHILD"); args != "" {
		os.Exit(Main(strings.Split(args, " "), os.Stdout, os.Stderr))
	}
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hung.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestInterruptExits130$")
	cmd.Env = append(os.Environ(), "OSB_BUILDER_CHILD=inspect --insecure "+strings.TrimPrefix(hung.URL, "http://")+"/os/x:1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // in the registry fetch by now
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != exitcode.Interrupted {
		t.Errorf("exit %d (%v), want %d; stderr %q", code, err, exitcode.Interrupted, stderr.String())
	}
	if !strings.Contains(stderr.String(), "builder: interrupted") {
		t.Errorf("stderr %q", stderr.String())
	}
}
