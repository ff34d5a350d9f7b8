package builder

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// swapInto atomically replaces final with stage: readers see the old
// complete output or the new complete output, never a mix.
func swapInto(stage, final string) error {
	err := unix.Renameat2(unix.AT_FDCWD, stage, unix.AT_FDCWD, final, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		return os.Rename(stage, final)
	}
	return err // on success stage now holds the old output, removed by the caller
}

// Staging directories are judged live by an flock on the directory itself,
// not by a PID in their name: the kernel drops the lock when the build dies
// (kill -9 included), and it means the same to a build in another PID
// namespace writing the same output from a container.

func stagingPattern(final string) string {
	return "." + filepath.Base(final) + ".staging-"
}

// newStaging makes a staging directory beside final and locks it; unlock
// releases the lock.
func newStaging(final string) (dir string, unlock func(), err error) {
	for range 10 {
		dir, err := os.MkdirTemp(filepath.Dir(final), stagingPattern(final))
		if err != nil {
			return "", nil, err
		}
		f, err := lockDir(dir)
		if err == nil {
			return dir, func() { f.Close() }, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.EWOULDBLOCK) {
			return "", nil, err
		}
		// Swept by another build between MkdirTemp and the lock: again.
	}
	return "", nil, errors.New("staging directory swept repeatedly")
}

// lockDir takes an exclusive flock on dir without waiting and checks that
// dir still names the locked directory (a sweeper may have removed it).
func lockDir(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	held, err1 := f.Stat()
	named, err2 := os.Lstat(dir)
	if err1 != nil || err2 != nil || !os.SameFile(held, named) {
		f.Close()
		return nil, fs.ErrNotExist
	}
	return f, nil
}

// removeStaleStaging deletes staging directories left by killed builds:
// those whose lock it can take.
func removeStaleStaging(final string) {
	matches, _ := filepath.Glob(filepath.Join(filepath.Dir(final), stagingPattern(final)+"*"))
	for _, m := range matches {
		f, err := lockDir(m)
		if err != nil {
			continue // live, or swept by another build
		}
		_ = os.RemoveAll(m)
		f.Close()
	}
}
