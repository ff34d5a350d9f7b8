package hostarch

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeProc writes a proc tree with the binfmt_misc files given (path under
// sys/fs/binfmt_misc -> contents).
func fakeProc(t *testing.T, files map[string]string) string {
	t.Helper()
	proc := t.TempDir()
	dir := filepath.Join(proc, "sys/fs/binfmt_misc")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return proc
}

func TestCheck(t *testing.T) {
	interp := filepath.Join(t.TempDir(), "qemu-aarch64-static")
	if err := os.WriteFile(interp, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	entry := func(state, interp string) string {
		return state + "\ninterpreter " + interp + "\nflags: PF\noffset 0\nmagic 7f454c460201010000000000000000000200b700\n"
	}
	found := func(string) (string, error) { return "/usr/bin/arch-test", nil }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	tests := []struct {
		name, native, arch string
		files              map[string]string // nil: binfmt_misc not mounted
		lookPath           func(string) (string, error)
		want               []string // substrings of the error; none: no error
	}{
		{name: "native needs nothing", native: "arm64", arch: "arm64"},
		{name: "native amd64", native: "amd64", arch: "amd64"},
		{name: "emulated", native: "amd64", arch: "arm64", lookPath: found,
			files: map[string]string{"status": "enabled\n", "qemu-aarch64": entry("enabled", interp)}},
		{name: "not mounted", native: "amd64", arch: "arm64", lookPath: found,
			want: []string{"binfmt_misc is not mounted", "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc", "update-binfmts --enable qemu-aarch64"}},
		{name: "binfmt_misc disabled", native: "amd64", arch: "arm64", lookPath: found,
			files: map[string]string{"status": "disabled\n", "qemu-aarch64": entry("enabled", interp)},
			want:  []string{"binfmt_misc is disabled", "echo 1 > /proc/sys/fs/binfmt_misc/status"}},
		{name: "no qemu-user", native: "amd64", arch: "arm64", lookPath: found,
			files: map[string]string{"status": "enabled\n"},
			want:  []string{"no qemu-aarch64 entry", "apt-get install qemu-user-static binfmt-support"}},
		{name: "entry disabled", native: "amd64", arch: "arm64", lookPath: found,
			files: map[string]string{"status": "enabled\n", "qemu-aarch64": entry("disabled", interp)},
			want:  []string{"qemu-aarch64 entry is disabled", "update-binfmts --enable qemu-aarch64"}},
		{name: "interpreter gone", native: "amd64", arch: "arm64", lookPath: found,
			files: map[string]string{"status": "enabled\n", "qemu-aarch64": entry("enabled", "/nonexistent/qemu-aarch64")},
			want:  []string{"/nonexistent/qemu-aarch64, which is missing", "apt-get install --reinstall qemu-user-static"}},
		{name: "no arch-test", native: "amd64", arch: "arm64", lookPath: missing,
			files: map[string]string{"status": "enabled\n", "qemu-aarch64": entry("enabled", interp)},
			want:  []string{"apt-get install arch-test"}},
		{name: "amd64 on arm64", native: "arm64", arch: "amd64", lookPath: found,
			files: map[string]string{"status": "enabled\n"},
			want:  []string{"building amd64 on this arm64 host", "no qemu-x86_64 entry"}},
		{name: "unknown architecture", native: "amd64", arch: "riscv64", lookPath: found,
			want: []string{"riscv64: no emulation known"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := filepath.Join(t.TempDir(), "noproc")
			if tt.files != nil {
				proc = fakeProc(t, tt.files)
			}
			err := Host{Proc: proc, Native: tt.native, LookPath: tt.lookPath}.Check(tt.arch)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Check(%s) on %s: %v", tt.arch, tt.native, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check(%s) on %s: no error, want %q", tt.arch, tt.native, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

// TestCheckThisHost runs the check on the real /proc: the host make setup
// prepared builds arm64 (and its own architecture).
func TestCheckThisHost(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		if err := Check(arch); err != nil {
			if os.Getenv("CI") == "" {
				t.Skipf("this host cannot build %s (run make setup): %v", arch, err)
			}
			t.Errorf("%s: %v", arch, err)
		}
	}
}
