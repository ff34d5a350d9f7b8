package pid1

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRemoveSameDevice(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a/b"), 0o755)
	os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("x"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	removeSameDevice(dir, deviceOf(t, dir))
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Errorf("followed a symlink: %v", err)
	}
	// A different device number leaves everything alone.
	os.WriteFile(filepath.Join(dir, "keep"), nil, 0o644)
	removeSameDevice(dir, deviceOf(t, dir)+1)
	if _, err := os.Stat(filepath.Join(dir, "keep")); err != nil {
		t.Errorf("removed a file of another device: %v", err)
	}
}

func deviceOf(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}

func TestExistsInRoot(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "usr/sbin"), 0o755)
	os.MkdirAll(filepath.Join(root, "lib/systemd"), 0o755)
	os.WriteFile(filepath.Join(root, "lib/systemd/systemd"), nil, 0o755)
	os.Symlink("usr/sbin", filepath.Join(root, "sbin"))
	// Absolute: resolved inside root, not on the host.
	os.Symlink("/lib/systemd/systemd", filepath.Join(root, "usr/sbin/init"))
	os.Symlink("/etc/passwd", filepath.Join(root, "usr/sbin/host-only"))
	if err := existsInRoot(root, "/sbin/init"); err != nil {
		t.Errorf("/sbin/init: %v", err)
	}
	if err := existsInRoot(root, "/sbin/host-only"); err == nil {
		t.Error("a symlink was resolved against the host's root")
	}
}
