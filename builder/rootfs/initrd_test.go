package rootfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cavaliergopher/cpio"
	"github.com/klauspost/compress/zstd"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/initrd/layout"
)

func TestInitrdCmdline(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"console=ttyS0,115200", ""},
		{"console=ttyS0 osb.persist=/var/lib/a,/var/lib/b osb.persist.required=1", "osb.persist=/var/lib/a,/var/lib/b osb.persist.required=1"},
		{"  osb.fatal=reboot:30\tquiet  osb.debug ", "osb.fatal=reboot:30 osb.debug"},
		{"xosb.debug systemd.osb.x=1", ""},
	} {
		if got := InitrdCmdline(tc.in); got != tc.want {
			t.Errorf("InitrdCmdline(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// fakeInitrdInputs makes the smallest kernel and assemble step outputs the
// initrd step packs: a kernel release without modules, no tools.
func fakeInitrdInputs(t *testing.T) (step.Kernel, step.Assembled, string) {
	t.Helper()
	k, a := t.TempDir(), t.TempDir()
	buildertest.Must(t, os.WriteFile(filepath.Join(k, step.KernelRelease), []byte("6.1.0-test\n"), 0o644))
	mods := filepath.Join(k, step.ModulesDir, "usr/lib/modules/6.1.0-test")
	buildertest.Must(t, os.MkdirAll(mods, 0o755))
	buildertest.Must(t, os.WriteFile(filepath.Join(mods, "modules.dep"), nil, 0o644))
	buildertest.Must(t, os.MkdirAll(filepath.Join(a, step.InitrdFiles), 0o755))
	buildertest.Must(t, os.WriteFile(filepath.Join(a, step.InitrdList), nil, 0o644))
	init := filepath.Join(t.TempDir(), "init")
	buildertest.Must(t, os.WriteFile(init, []byte("\x7fELF init"), 0o755))
	return step.Kernel{Dir: k}, step.Assembled{Dir: a}, init
}

// TestInitrdStepCarriesCmdline: the initrd without root (and so the live
// initrd, which is the root's segments before it) holds the osb.* words of
// the image's command line at layout.CmdlinePath, and the step's key
// changes with them, not with the other words.
func TestInitrdStepCarriesCmdline(t *testing.T) {
	k, a, init := fakeInitrdInputs(t)
	const cmdline = "console=ttyS0 osb.persist=/var/lib/osb-persist-test osb.persist.required=1"
	s := NewInitrd(k, a, init, []string{}, cmdline, buildertest.Epoch)
	out := t.TempDir()
	buildertest.Must(t, s.Run(context.Background(), out))
	got, ok := initrdEntry(t, Initrd(out), layout.CmdlinePath)
	if !ok || got != "osb.persist=/var/lib/osb-persist-test osb.persist.required=1\n" {
		t.Errorf("%s in the initrd = %q (present %v)", layout.CmdlinePath, got, ok)
	}

	key := func(cmdline string) string {
		in, err := NewInitrd(k, a, init, []string{}, cmdline, buildertest.Epoch).Inputs()
		buildertest.Must(t, err)
		return in.Key()
	}
	base := key(cmdline)
	if key("console=ttyS1 quiet osb.persist=/var/lib/osb-persist-test osb.persist.required=1") != base {
		t.Error("the key changed with words the initrd does not carry")
	}
	for _, other := range []string{"", "osb.persist=/var/lib/other osb.persist.required=1", "osb.persist=/var/lib/osb-persist-test"} {
		if key(other) == base {
			t.Errorf("the key is the same for %q and %q", other, cmdline)
		}
	}

	// A command line past the bound fails the step, naming the bound.
	long := "osb.persist=/" + strings.Repeat("a", layout.MaxCmdline)
	if err := NewInitrd(k, a, init, []string{}, long, buildertest.Epoch).Run(context.Background(), t.TempDir()); err == nil ||
		!strings.Contains(err.Error(), "more than 4095") {
		t.Errorf("oversized command line: %v", err)
	}

	// Without osb.* words there is no file: the init then obeys the
	// loader alone, as before.
	out = t.TempDir()
	buildertest.Must(t, NewInitrd(k, a, init, []string{}, "console=ttyS0", buildertest.Epoch).Run(context.Background(), out))
	if got, ok := initrdEntry(t, Initrd(out), layout.CmdlinePath); ok {
		t.Errorf("initrd without osb.* words holds %q", got)
	}
}

// initrdEntry reads one file of a zstd-compressed newc initrd.
func initrdEntry(t *testing.T, initrd, name string) (string, bool) {
	t.Helper()
	f, err := os.Open(initrd)
	buildertest.Must(t, err)
	defer f.Close()
	zr, err := zstd.NewReader(f)
	buildertest.Must(t, err)
	defer zr.Close()
	cr := cpio.NewReader(zr)
	for {
		h, err := cr.Next()
		if errors.Is(err, io.EOF) {
			return "", false
		}
		buildertest.Must(t, err)
		if "/"+strings.TrimPrefix(h.Name, "/") == name {
			b, err := io.ReadAll(cr)
			buildertest.Must(t, err)
			return string(b), true
		}
	}
}
