package testutil

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// CI reports whether the tests run in CI, where a missing tool is a failure
// rather than a reason to skip.
func CI() bool { return os.Getenv("CI") != "" }

// Missing skips the test on a developer machine and fails it in CI: the
// one rule for tests whose host prerequisites are not there.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if !CI() {
		t.Skip(msg)
	}
	t.Fatal(msg + " (needed in CI)")
}

// RequireTool returns the path of the host tool name, or stops the test
// by the Missing rule.
func RequireTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s not installed: %v", name, err)
	}
	return p
}

// RequireFiles stops the test by the Missing rule unless every path exists
// (firmware images, EFI stubs and other files packages install).
func RequireFiles(t testing.TB, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			Missing(t, "not installed: %v", err)
		}
	}
}

// Run runs name with args and returns its standard output; it fails the
// test, showing both outputs, when the command fails.
func Run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", name, args, err, out, stderr.Bytes())
	}
	return out
}
