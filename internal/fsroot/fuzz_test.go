package fsroot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// FuzzStaysInside builds a random symlink farm inside a root, then
// creates, writes, chmods, chowns, renames and removes a random path in
// it: nothing outside the root may change. The farm is made once, on a
// tmpfs when there is one, and its root emptied and refilled after each
// input: a fresh farm per input cost more than the operations fuzzed.
func FuzzStaysInside(f *testing.F) {
	f.Add("a=/\nb=../../..\nvar/run=/run", "/var/run/foo")
	f.Add("etc/x=/", "/etc/x/y")
	f.Add("etc/x=../../../..", "etc/x/outside/sentinel")
	f.Add("l=HOST/outside", "/l/sentinel")
	f.Add("l=HOST/outside/sentinel", "/l")
	f.Add("a=b\nb=a", "/a/x")
	f.Add("x=/x/..//../x/.", "x/../../../outside")
	f.Add("d/e=/proc/self/root", "/d/e/etc/passwd")
	fm := newFarmIn(f, testutil.ScratchDir(f))
	f.Fuzz(func(t *testing.T, links, name string) {
		if len(links) > 1024 || len(name) > 512 {
			return
		}
		defer fm.reset(t)
		for i, line := range strings.Split(links, "\n") {
			if i == 16 {
				break
			}
			link, target, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			target = strings.ReplaceAll(target, "HOST", fm.host)
			_ = fm.r.MkdirAll(filepath.Dir("/"+link), 0o755)
			_ = fm.r.Symlink(target, link)
		}
		_ = fm.r.MkdirAll(name, 0o755)
		_ = fm.r.WriteFile(name+"/f", strings.NewReader("fuzz"), 0o644)
		_ = fm.r.WriteFile(name, strings.NewReader("fuzz"), 0o644)
		_ = fm.r.Chmod(name, 0o777)
		_ = fm.r.Symlink("/", name+"/s")
		if os.Geteuid() == 0 {
			_ = fm.r.Chown(name, 4321, 4321)
			_ = fm.r.Lchown(name, 4321, 4321)
		}
		_, _ = fm.r.ReadFile(name, 1<<20)
		_, _ = fm.r.Glob(name + "/*")
		_ = fm.r.Rename(name, name+".new")
		_ = fm.r.Remove(name)
		_ = fm.r.RemoveAll(name + ".new")
		_ = fm.r.RemoveAll(name)
		fm.untouched(t)
	})
}
