package testutil

import (
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// InterruptCLI runs the calling test again as a child process in which
// run executes a CLI with the arguments args gives for a registry host
// that accepts connections and never answers; it interrupts the child
// (SIGINT) once it hangs there and fails t unless the child exits with
// wantCode and its stderr holds wantStderr. In the child, InterruptCLI
// exits with run's code. childEnv names the variable that marks the child.
func InterruptCLI(t *testing.T, childEnv string, wantCode int, wantStderr string, args func(registry string) string, run func(args []string) int) {
	t.Helper()
	if a := os.Getenv(childEnv); a != "" {
		os.Exit(run(strings.Split(a, " ")))
	}
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer hung.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$")
	cmd.Env = append(os.Environ(), childEnv+"="+args(strings.TrimPrefix(hung.URL, "http://")))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // in the registry fetch by now
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != wantCode {
		t.Errorf("exit %d, want %d; stderr %q", code, wantCode, stderr.String())
	}
	if !strings.Contains(stderr.String(), wantStderr) {
		t.Errorf("stderr %q, want %q in it", stderr.String(), wantStderr)
	}
}
