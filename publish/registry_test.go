package publish_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// registryHost is host:port of the docker-registry process TestMain runs;
// empty when the binary is missing outside CI.
var registryHost string

// TestMain runs one registry for the whole package: starting one per test
// would cost a process start and a readiness wait each.
func TestMain(m *testing.M) {
	// Fuzz workers run only the fuzz function: no registry for them (one
	// per worker process, left behind when the fuzzer stops a worker).
	if slices.ContainsFunc(os.Args[1:], func(a string) bool { return strings.HasPrefix(a, "-test.fuzzworker") }) {
		os.Exit(m.Run())
	}
	reg, err := testutil.StartRegistry()
	if err != nil && !(errors.Is(err, exec.ErrNotFound) && !testutil.CI()) {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
	if reg != nil {
		registryHost = reg.Host
	}
	code := m.Run()
	if reg != nil {
		reg.Stop()
	}
	os.Exit(code)
}

func requireRegistry(t testing.TB) string {
	t.Helper()
	if registryHost == "" {
		t.Skip("docker-registry not installed")
	}
	return registryHost
}
