package testutil

import (
	"os"
	"testing"
)

// Build outputs that `make test` builds before `go test` and names in the
// environment, for the tests that boot real images.
const (
	// TestOutputEnv names recipes/test.yaml's output directory.
	TestOutputEnv = "OSB_TEST_OUTPUT"
	// HypervisorOutputEnv names recipes/hypervisor.yaml's output directory.
	HypervisorOutputEnv = "OSB_HYPERVISOR_OUTPUT"
	// SignedTestOutputEnv names recipes/test.yaml's output signed for
	// Secure Boot, SignCertEnv the certificate of its key (to enroll).
	SignedTestOutputEnv = "OSB_TEST_SIGNED_OUTPUT"
	SignCertEnv         = "OSB_TEST_SIGN_CERT"
)

// Output returns the build output directory named by env, or stops the
// test by the Missing rule (skip on a developer machine, fail in CI).
func Output(t testing.TB, env string) string {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		Missing(t, "%s unset: run the tests through `make test` (or `make test-image` and set it)", env)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("%s=%s: %v", env, dir, err)
	}
	return dir
}

// MultiUser is the console line the test image prints once systemd reached
// multi-user.target (osb-boot-report.service, in the test-hello layer).
// systemd's own "Reached target" status line is no proof: systemd stops
// printing status once a getty runs on the serial console, which on a
// slow boot comes first.
const MultiUser = "osb-boot-report: reached multi-user.target"

// RootReady is the init's console line once the root is mounted, before
// it hands over to systemd.
const RootReady = "osb-init: root ready"

// TestImageMarkers are what every boot of the test image (recipes/test.yaml)
// prints, in any order: our init took its root, the test-hello layer's
// enabled unit ran, its file is in place, its user exists (id osb-test),
// and systemd reached multi-user.target.
var TestImageMarkers = []string{
	RootReady,
	"os-builder: hello from layer",
	"hello.txt from layer test-hello",
	"uid=",
	MultiUser,
}
