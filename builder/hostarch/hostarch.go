// Package hostarch checks, before a build starts, that this host can run
// the target architecture's programs: mmdebstrap runs the image's
// maintainer scripts, which on a foreign architecture need qemu-user
// through binfmt_misc. The builder only reads host state here; it never
// mounts binfmt_misc or registers interpreters (`make setup` does, once).
package hostarch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Native is the Debian architecture of this host (Go's names for amd64
// and arm64 are Debian's).
func Native() string { return runtime.GOARCH }

// qemuEntries are the binfmt_misc entries Debian's qemu-user-static
// registers, per Debian architecture.
var qemuEntries = map[string]string{
	"amd64": "qemu-x86_64",
	"arm64": "qemu-aarch64",
}

// Host is what the check reads: the proc file system and the programs on
// PATH. Tests point it at a fake tree.
type Host struct {
	// Proc is the proc file system's mount point; "" means /proc.
	Proc string
	// Native is the host's architecture; "" means Native().
	Native string
	// LookPath finds a program; nil means exec.LookPath.
	LookPath func(string) (string, error)
}

// Check says whether arch's programs run here: natively, or through an
// enabled binfmt_misc entry for qemu-user whose interpreter exists, and
// whether mmdebstrap can bootstrap it (arch-test). Its error says what to
// install or run.
func Check(arch string) error { return Host{}.Check(arch) }

// Check is the package's Check on h.
func (h Host) Check(arch string) error {
	native := h.Native
	if native == "" {
		native = Native()
	}
	if arch == native {
		return nil
	}
	entry, ok := qemuEntries[arch]
	if !ok {
		return fmt.Errorf("architecture %s: no emulation known on a %s host (want amd64 or arm64)", arch, native)
	}
	proc := h.Proc
	if proc == "" {
		proc = "/proc"
	}
	lookPath := h.LookPath
	if lookPath == nil {
		lookPath = exec.LookPath
	}
	pre := fmt.Sprintf("building %s on this %s host runs its maintainer scripts under qemu-user", arch, native)
	binfmt := filepath.Join(proc, "sys/fs/binfmt_misc")
	status, err := os.ReadFile(filepath.Join(binfmt, "status"))
	if err != nil {
		return fmt.Errorf("%s, but binfmt_misc is not mounted (%s/status: %w); as root:\n"+
			"  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && update-binfmts --enable %s\n"+
			"(make setup does both)", pre, binfmt, errors.Unwrap(err), entry)
	}
	if strings.TrimSpace(string(status)) != "enabled" {
		return fmt.Errorf("%s, but binfmt_misc is disabled (%s/status); as root:\n"+
			"  echo 1 > /proc/sys/fs/binfmt_misc/status", pre, binfmt)
	}
	reg, err := os.ReadFile(filepath.Join(binfmt, entry))
	if err != nil {
		return fmt.Errorf("%s, but binfmt_misc has no %s entry; as root:\n"+
			"  apt-get install qemu-user-static binfmt-support && update-binfmts --enable %s\n"+
			"(make setup does both)", pre, entry, entry)
	}
	lines := strings.Split(string(reg), "\n")
	if strings.TrimSpace(lines[0]) != "enabled" {
		return fmt.Errorf("%s, but binfmt_misc's %s entry is disabled; as root:\n"+
			"  update-binfmts --enable %s", pre, entry, entry)
	}
	for _, l := range lines[1:] {
		interp, ok := strings.CutPrefix(l, "interpreter ")
		if !ok {
			continue
		}
		if _, err := os.Stat(interp); err != nil {
			return fmt.Errorf("%s, but binfmt_misc's %s entry names %s, which is missing; as root:\n"+
				"  apt-get install --reinstall qemu-user-static && update-binfmts --enable %s", pre, entry, interp, entry)
		}
	}
	// mmdebstrap refuses a foreign --arch without arch-test.
	if _, err := lookPath("arch-test"); err != nil {
		return fmt.Errorf("%s, and mmdebstrap needs arch-test for a foreign architecture; as root:\n"+
			"  apt-get install arch-test", pre)
	}
	return nil
}
