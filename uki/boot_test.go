package uki

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

const (
	ovmfCode = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	ovmfVars = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

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

// TestBootInQEMU boots a signed UKI built from a real kernel in QEMU with
// OVMF (-kernel hands the PE to the firmware, which starts systemd-stub).
// The init printing the marker from the .cmdline section proves the stub
// ran, used the embedded command line and passed the embedded initrd.
func TestBootInQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("boot test skipped in -short mode")
	}
	kernelPath := testKernel(t)
	qemu := testutil.RequireTool(t, "qemu-system-x86_64")
	testutil.RequireFiles(t, ovmfCode, ovmfVars)
	kernel, err := os.ReadFile(kernelPath)
	if err != nil {
		t.Fatal(err)
	}
	dir := testKeyDir(t)
	key, cert, err := LoadSigner(filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	if err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("osb.ukitest=%d", time.Now().UnixNano())
	work := t.TempDir()
	ukiPath := filepath.Join(work, "uki.efi")
	err = BuildFile(ukiPath, Options{
		Stub:        hostStub(t),
		Kernel:      kernel,
		Initrd:      bootInitrd(t),
		Cmdline:     "console=ttyS0 panic=-1 loglevel=4 " + marker,
		OSRelease:   "ID=debian\nPRETTY_NAME=\"uki boot test\"\n",
		Uname:       strings.TrimPrefix(filepath.Base(kernelPath), "vmlinuz-"),
		Signer:      key,
		Certificate: cert,
	})
	if err != nil {
		t.Fatal(err)
	}
	vars := filepath.Join(work, "OVMF_VARS.fd")
	varsData, err := os.ReadFile(ovmfVars)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vars, varsData, 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu,
		"-machine", "q35", "-accel", "tcg", "-m", "512", "-nographic", "-no-reboot",
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+ovmfCode,
		"-drive", "if=pflash,format=raw,unit=1,file="+vars,
		"-nic", "none",
		"-kernel", ukiPath,
	)
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	log := out.String()
	if ctx.Err() != nil {
		t.Fatalf("QEMU did not power off within the timeout; console:\n%s", tail(log, 4000))
	}
	if err != nil {
		t.Fatalf("QEMU: %v; console:\n%s", err, tail(log, 4000))
	}
	if !strings.Contains(log, "uki-boot-ok") {
		t.Fatalf("init never reported; console:\n%s", tail(log, 4000))
	}
	line := log[strings.Index(log, "uki-boot-ok"):]
	line, _, _ = strings.Cut(line, "\n")
	if !strings.Contains(line, marker) {
		t.Fatalf("kernel command line lacks the .cmdline marker %q: %s", marker, line)
	}
	t.Logf("booted in %v: %s", time.Since(start).Round(time.Second), strings.TrimSpace(line))
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
