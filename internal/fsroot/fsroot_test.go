package fsroot

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// farm is a host directory holding an image root and, beside it, a
// sentinel that no operation inside the root may touch.
type farm struct {
	host, root, sentinel string
	r                    *Root
}

func newFarm(t testing.TB) *farm { return newFarmIn(t, t.TempDir()) }

// newFarmIn makes the farm in the empty directory host.
func newFarmIn(t testing.TB, host string) *farm {
	t.Helper()
	f := &farm{host: host, root: filepath.Join(host, "root"), sentinel: filepath.Join(host, "outside", "sentinel")}
	must(t, os.MkdirAll(filepath.Join(host, "outside"), 0o755))
	must(t, os.WriteFile(f.sentinel, []byte("host"), 0o600))
	must(t, os.Mkdir(f.root, 0o755))
	f.populate(t)
	r, err := Open(f.root)
	must(t, err)
	t.Cleanup(func() { r.Close() })
	f.r = r
	return f
}

// populate fills the empty root.
func (f *farm) populate(t testing.TB) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(f.root, "run"), 0o755))
	must(t, os.MkdirAll(filepath.Join(f.root, "var"), 0o755))
	// What Debian trees hold, and what a hostile layer may ship.
	must(t, os.Symlink("/run", filepath.Join(f.root, "var/run")))
	must(t, os.Symlink("/", filepath.Join(f.root, "slash")))
	must(t, os.Symlink("../../../../..", filepath.Join(f.root, "up")))
	must(t, os.Symlink(filepath.Join(f.host, "outside"), filepath.Join(f.root, "hostdir")))
	must(t, os.Symlink(f.sentinel, filepath.Join(f.root, "hostfile")))
}

// reset empties the root (through host paths, which stay in the root: the
// host's own RemoveAll follows no symlink) and fills it again, as it was
// made; the root directory's mode and owner are restored too.
func (f *farm) reset(t testing.TB) {
	t.Helper()
	names, err := os.ReadDir(f.root)
	must(t, err)
	for _, n := range names {
		must(t, os.RemoveAll(filepath.Join(f.root, n.Name())))
	}
	must(t, os.Chmod(f.root, 0o755))
	must(t, os.Lchown(f.root, os.Geteuid(), os.Getegid()))
	f.populate(t)
}

// untouched fails the test if anything outside the root changed.
func (f *farm) untouched(t testing.TB) {
	t.Helper()
	var got []string
	filepath.WalkDir(f.host, func(p string, d fs.DirEntry, err error) error {
		if p == f.root {
			return filepath.SkipDir
		}
		got = append(got, p)
		return nil
	})
	want := []string{f.host, filepath.Join(f.host, "outside"), f.sentinel}
	if !slices.Equal(got, want) {
		t.Fatalf("host tree changed: %v, want %v", got, want)
	}
	fi, err := os.Stat(f.sentinel)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("sentinel: %v %v", fi, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != os.Geteuid() {
		t.Fatalf("sentinel owner now %d", st.Uid)
	}
	if b, _ := os.ReadFile(f.sentinel); string(b) != "host" {
		t.Fatalf("sentinel now holds %q", b)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWriteResolvesInsideRoot(t *testing.T) {
	for _, tc := range []struct {
		name, lands string // lands: host path under the root, "" = must fail
	}{
		{"/var/run/foo", "run/foo"},
		{"var/run/foo", "run/foo"},
		{"/slash/run/x", "run/x"},
		{"/up/sentinel", "sentinel"},
		{"/up/outside/sentinel", ""}, // no outside/ inside the root
		{"/hostdir/sentinel", ""},    // an absolute host path means nothing inside
		{"/hostfile", "hostfile"},    // a final symlink is replaced, not followed
		{"/var/../../../x", "x"},
		{"/", ""},
		{"/var/..", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFarm(t)
			err := f.r.WriteFile(tc.name, strings.NewReader("new"), 0o640)
			if tc.lands == "" {
				if err == nil {
					t.Fatalf("WriteFile(%q) succeeded", tc.name)
				}
			} else {
				must(t, err)
				fi, err := os.Lstat(filepath.Join(f.root, tc.lands))
				must(t, err)
				if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o640 {
					t.Errorf("%s: mode %v", tc.lands, fi.Mode())
				}
			}
			f.untouched(t)
		})
	}
}

func TestMkdirAllFollowsLinksInsideRoot(t *testing.T) {
	f := newFarm(t)
	must(t, f.r.MkdirAll("/var/run/a/b", 0o755))
	must(t, f.r.MkdirAll("/up/outside/c", 0o755))
	// Inside the root, the host path the link names does not exist.
	if err := f.r.MkdirAll("/hostdir/d", 0o755); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("MkdirAll through a dangling link = %v", err)
	}
	must(t, os.MkdirAll(filepath.Join(f.root, f.host, "outside"), 0o755))
	must(t, f.r.MkdirAll("/hostdir/d", 0o755))
	for _, p := range []string{"run/a/b", "outside/c", f.host[1:] + "/outside/d"} {
		if fi, err := os.Lstat(filepath.Join(f.root, p)); err != nil || !fi.IsDir() {
			t.Errorf("%s: %v %v", p, fi, err)
		}
	}
	must(t, f.r.WriteFile("/x", strings.NewReader(""), 0o644))
	if err := f.r.MkdirAll("/x/y", 0o755); err == nil {
		t.Error("MkdirAll through a file succeeded")
	}
	must(t, f.r.Symlink("/nowhere", "/dangling"))
	if err := f.r.MkdirAll("/dangling/y", 0o755); err == nil {
		t.Error("MkdirAll through a dangling symlink succeeded")
	}
	f.untouched(t)
}

func TestRemoveStaysInsideRoot(t *testing.T) {
	f := newFarm(t)
	for _, name := range []string{"/up/outside/sentinel", "/hostdir/sentinel", "/slash/outside/sentinel"} {
		if err := f.r.Remove(name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Remove(%q) = %v, want not-exist", name, err)
		}
		if err := f.r.RemoveAll(name); err != nil {
			t.Errorf("RemoveAll(%q) = %v", name, err)
		}
	}
	// A directory holding links out: the links go, their targets stay.
	must(t, f.r.MkdirAll("/d/e", 0o755))
	must(t, f.r.Symlink(filepath.Join(f.host, "outside"), "/d/e/out"))
	must(t, os.Symlink(filepath.Join(f.host, "outside"), filepath.Join(f.root, "d/out2")))
	must(t, f.r.RemoveAll("/d"))
	// A symlink to a directory is removed as a link.
	must(t, f.r.RemoveAll("/hostdir"))
	must(t, f.r.Remove("/hostfile"))
	must(t, f.r.RemoveAll("/up"))
	for _, p := range []string{"d", "hostdir", "hostfile", "up"} {
		if _, err := os.Lstat(filepath.Join(f.root, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
	must(t, f.r.RemoveAll("/not/there"))
	f.untouched(t)
}

func TestReadsResolveInsideRoot(t *testing.T) {
	f := newFarm(t)
	must(t, os.WriteFile(filepath.Join(f.root, "run/data"), []byte("inside"), 0o644))
	must(t, os.Symlink("/var/run/data", filepath.Join(f.root, "abs")))
	must(t, os.Symlink("../../../../../../run/data", filepath.Join(f.root, "var/rel")))
	for _, name := range []string{"/var/run/data", "/abs", "/var/rel", "/up/up/run/data", "slash/abs"} {
		b, err := f.r.ReadFile(name, 100)
		if err != nil || string(b) != "inside" {
			t.Errorf("ReadFile(%q) = %q, %v", name, b, err)
		}
	}
	for _, name := range []string{"/hostfile", "/hostdir/sentinel", "/up/outside/sentinel"} {
		if b, err := f.r.ReadFile(name, 100); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("ReadFile(%q) = %q, %v; want not-exist", name, b, err)
		}
		if _, err := f.r.Stat(name); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat(%q) = %v; want not-exist", name, err)
		}
	}
	if _, err := f.r.ReadFile("/abs", 5); err == nil || !strings.Contains(err.Error(), "more than the 5 allowed") {
		t.Errorf("ReadFile over the limit: %v", err)
	}
	if _, err := f.r.ReadFile("/run", 5); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("ReadFile of a directory: %v", err)
	}
	// Devices and FIFOs are refused, without blocking.
	must(t, unix.Mkfifo(filepath.Join(f.root, "run/fifo"), 0o644))
	must(t, os.MkdirAll(filepath.Join(f.root, "dev"), 0o755))
	must(t, unix.Mknod(filepath.Join(f.root, "dev/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, os.Symlink("/dev/null", filepath.Join(f.root, "null")))
	for _, name := range []string{"/var/run/fifo", "/null"} {
		if _, err := f.r.Open(name); err == nil || !strings.Contains(err.Error(), "not a regular file or directory") {
			t.Errorf("Open(%s) = %v", name, err)
		}
	}
	fi, err := f.r.Lstat("/hostfile")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("Lstat(/hostfile) = %v, %v", fi, err)
	}
	if l, err := f.r.Readlink("/var/run"); err != nil || l != "/run" {
		t.Errorf("Readlink = %q, %v", l, err)
	}
	names, err := f.r.ReadDirNames("/var/run")
	if err != nil || !slices.Equal(names, []string{"data", "fifo"}) {
		t.Errorf("ReadDirNames(/var/run) = %v, %v", names, err)
	}
	m, err := f.r.Glob("/var/run/d*")
	if err != nil || !slices.Equal(m, []string{"/var/run/data"}) {
		t.Errorf("Glob = %v, %v", m, err)
	}
	if m, _ := f.r.Glob("/hostdir/*"); len(m) != 0 {
		t.Errorf("Glob through a host link = %v", m)
	}
	f.untouched(t)
}

func TestAttributesStayInsideRoot(t *testing.T) {
	f := newFarm(t)
	for _, name := range []string{"/hostfile", "/up/outside/sentinel", "/hostdir/sentinel"} {
		if err := f.r.Chmod(name, 0o777); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Chmod(%q) = %v", name, err)
		}
		if err := f.r.Chown(name, 1234, 1234); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Chown(%q) = %v", name, err)
		}
	}
	must(t, f.r.WriteFile("/run/f", strings.NewReader(""), 0o644))
	must(t, f.r.Chmod("/var/run/f", 0o4755|fs.ModeSetuid))
	fi, err := os.Stat(filepath.Join(f.root, "run/f"))
	if err != nil || fi.Mode() != fs.ModeSetuid|0o755 {
		t.Errorf("after Chmod: %v %v", fi, err)
	}
	if os.Geteuid() == 0 {
		must(t, f.r.Chown("/var/run/f", 1234, 1235))
		must(t, f.r.Lchown("/hostfile", 1236, 1237)) // the link itself
		for p, want := range map[string]uint32{"run/f": 1234, "hostfile": 1236} {
			fi, err := os.Lstat(filepath.Join(f.root, p))
			must(t, err)
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != want || st.Gid != want+1 {
				t.Errorf("%s owned by %d:%d, want %d:%d", p, st.Uid, st.Gid, want, want+1)
			}
		}
	}
	must(t, f.r.Rename("/var/run/f", "/slash/g"))
	if _, err := os.Stat(filepath.Join(f.root, "g")); err != nil {
		t.Error(err)
	}
	f.untouched(t)
}

// openEvents runs do and returns the names in dir that were opened for
// reading or writing meanwhile (inotify IN_OPEN): an O_PATH open is not
// one, the open that reaches a FIFO's or a device driver's open is.
func openEvents(t *testing.T, dir string, do func()) []string {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	must(t, err)
	defer unix.Close(fd)
	_, err = unix.InotifyAddWatch(fd, dir, unix.IN_OPEN)
	must(t, err)
	do()
	buf := make([]byte, 64<<10)
	n, err := unix.Read(fd, buf)
	if err == unix.EAGAIN {
		return nil
	}
	must(t, err)
	var names []string
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := string(buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)])
		names = append(names, strings.TrimRight(name, "\x00"))
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	return names
}

// TestOpenChecksBeforeOpening: Open refuses a FIFO or a device node before
// opening it for reading, so no driver's open runs (a watchdog starts
// counting on open). inotify shows whether the node was opened; and since
// the open after the check does not ask for O_NONBLOCK, a FIFO opened
// there would block until a writer came: the refusal must come at once.
// Before, Open opened with O_NONBLOCK and checked the type after: the
// node was opened (and a device's open ran) before the refusal.
func TestOpenChecksBeforeOpening(t *testing.T) {
	f := newFarm(t)
	dir := filepath.Join(f.root, "run")
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	must(t, unix.Mknod(filepath.Join(dir, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, os.WriteFile(filepath.Join(dir, "data"), []byte("inside"), 0o644))
	for _, tc := range []struct {
		name   string
		opened []string // what inotify must see opened
		err    string
	}{
		{"/var/run/fifo", nil, "not a regular file or directory"},
		{"/run/null", nil, "not a regular file or directory"},
		{"/var/run/data", []string{"data"}, ""},
		{"/var/run", []string{""}, ""}, // the watched directory itself: no name
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			got := openEvents(t, dir, func() {
				done := make(chan error, 1)
				go func() {
					file, err := f.r.Open(tc.name)
					if err == nil {
						file.Close()
					}
					done <- err
				}()
				select {
				case err = <-done:
				case <-time.After(5 * time.Second):
					// Let the blocked open go: a writer, never blocking.
					if w, werr := os.OpenFile(filepath.Join(dir, "fifo"), os.O_RDWR, 0); werr == nil {
						defer w.Close()
					}
					t.Fatalf("Open(%s) blocked: it opened the FIFO before checking its type", tc.name)
				}
			})
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("Open(%s) = %v, want %q", tc.name, err, tc.err)
			}
			if !slices.Equal(got, tc.opened) {
				t.Errorf("Open(%s) opened %q, want %q", tc.name, got, tc.opened)
			}
		})
	}
	f.untouched(t)
}
