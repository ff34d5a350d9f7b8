package uki

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// The QEMU boots of this package's UKIs are TestSecureBootEnforced
// (secureboot_test.go); these are what they boot: a real kernel, and an
// initrd holding testdata/bootinit.

// testKernel finds a real kernel: $OSB_TEST_KERNEL, else the test image's
// (vmlinuz in $OSB_TEST_OUTPUT), else one in the development root file
// system.
func testKernel(t *testing.T) string {
	t.Helper()
	if k := os.Getenv("OSB_TEST_KERNEL"); k != "" {
		return k
	}
	if out := os.Getenv(testutil.TestOutputEnv); out != "" {
		return filepath.Join(out, "vmlinuz")
	}
	matches, _ := filepath.Glob("/var/tmp/osb-dev/rootfs/boot/vmlinuz-*")
	if len(matches) == 0 {
		testutil.Missing(t, "no kernel: set OSB_TEST_KERNEL to a bzImage or %s to a test image output", testutil.TestOutputEnv)
	}
	return matches[len(matches)-1]
}

// newcEntry appends one "newc" cpio entry.
func newcEntry(buf *bytes.Buffer, ino int, name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	fmt.Fprintf(buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	buf.WriteString(name + "\x00")
	for buf.Len()%4 != 0 {
		buf.WriteByte(0)
	}
	buf.Write(data)
	for buf.Len()%4 != 0 {
		buf.WriteByte(0)
	}
}

// bootInitrd builds testdata/bootinit as a static binary and wraps it in an
// uncompressed newc cpio with /dev/console and /proc.
func bootInitrd(t *testing.T) []byte {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = testutil.RequireTool(t, "go")
	}
	initPath := filepath.Join(t.TempDir(), "init")
	cmd := exec.Command(gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", initPath, "./testdata/bootinit")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building bootinit: %v\n%s", err, out)
	}
	initBin, err := os.ReadFile(initPath)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	newcEntry(&buf, 1, "dev", 0o40755, 0, 0, nil)
	newcEntry(&buf, 2, "dev/console", 0o20600, 5, 1, nil)
	newcEntry(&buf, 3, "proc", 0o40755, 0, 0, nil)
	newcEntry(&buf, 4, "init", 0o100755, 0, 0, initBin)
	newcEntry(&buf, 0, "TRAILER!!!", 0, 0, 0, nil)
	return buf.Bytes()
}
