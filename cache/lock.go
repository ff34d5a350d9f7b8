package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Liveness is an flock, not a PID: the kernel drops it when its holder dies
// (kill -9 included), and it means the same thing to builds in other PID
// namespaces sharing the cache volume, where PIDs mean nothing.

var errBusy = errors.New("locked by another process")

const (
	lockSuffix = ".lock"
	// lockPoll is how often a build waiting for another build's fill of
	// the same key retries the lock.
	lockPoll = 200 * time.Millisecond
	// lockedTempAge is when a temp directory without a lock file (left by
	// a builder from before the locks) or a stray Remember temp file is
	// considered abandoned.
	lockedTempAge = 24 * time.Hour
)

// tryLock takes an exclusive flock on path without waiting; errBusy when
// another process holds it. create makes the file when it is missing.
// After locking it checks that path still names the locked file: whoever
// held the lock before may have removed the file, and a lock on a removed
// file guards nothing.
func tryLock(path string, create bool) (*os.File, error) {
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	for {
		f, err := os.OpenFile(path, flag, 0o644)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, errBusy
			}
			return nil, fmt.Errorf("flock %s: %w", path, err)
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return f, nil
		}
		f.Close()
		if !create && (err2 != nil || err1 != nil) {
			return nil, fs.ErrNotExist
		}
	}
}

// keyLockPath is the fill lock of a valid key.
func (s *Store) keyLockPath(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.locksDir(), key+lockSuffix), nil
}

// lockKey takes the fill lock of key, waiting while another build holds it.
func (s *Store) lockKey(ctx context.Context, key, step string) (*os.File, error) {
	path, err := s.keyLockPath(key)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	logged := false
	for {
		f, err := tryLock(path, true)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, errBusy) {
			return nil, fmt.Errorf("cache: %w", err)
		}
		if !logged {
			s.logf("cache: %s: waiting for another build filling it", step)
			logged = true
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

// Temp is a private directory under the store's tmp/. Its lock, held until
// Remove, keeps the sweeper of any other build away from it.
type Temp struct {
	Path string
	lock *os.File
}

// NewTemp makes a locked temp directory; kind names its purpose.
func (s *Store) NewTemp(kind string) (*Temp, error) {
	for i := 0; ; i++ {
		var rnd [8]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return nil, err
		}
		dir := filepath.Join(s.tmpDir(), kind+"-"+hex.EncodeToString(rnd[:]))
		// The lock comes first: a directory whose lock file exists and is
		// held is live; the sweeper may take a lock file before we do, which
		// tryLock's same-file check and the retry cover.
		f, err := os.OpenFile(dir+lockSuffix, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			if errors.Is(err, fs.ErrExist) && i < 10 {
				continue
			}
			return nil, fmt.Errorf("cache: %w", err)
		}
		f.Close()
		l, err := tryLock(dir+lockSuffix, false)
		if err != nil {
			if i < 10 {
				continue
			}
			return nil, fmt.Errorf("cache: lock %s: %w", dir, err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			os.Remove(l.Name())
			l.Close()
			return nil, fmt.Errorf("cache: %w", err)
		}
		return &Temp{Path: dir, lock: l}, nil
	}
}

// Remove deletes the directory (if still there) and releases its lock.
func (t *Temp) Remove() error {
	err := os.RemoveAll(t.Path)
	os.Remove(t.lock.Name())
	t.lock.Close()
	return err
}

// sweep removes what dead builds left in tmp/: directories whose lock it can
// take, and (after lockedTempAge) directories that never had a lock.
func (s *Store) sweep() {
	des, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return
	}
	names := map[string]bool{}
	for _, de := range des {
		names[de.Name()] = true
	}
	for _, de := range des {
		name := de.Name()
		p := filepath.Join(s.tmpDir(), name)
		if dir, ok := strings.CutSuffix(name, lockSuffix); ok {
			l, err := tryLock(p, false)
			if err != nil {
				continue // live, or already swept by another build
			}
			_ = os.RemoveAll(filepath.Join(s.tmpDir(), dir))
			os.Remove(p)
			l.Close()
			continue
		}
		if names[name+lockSuffix] {
			continue // judged by its lock
		}
		if fi, err := de.Info(); err == nil && time.Since(fi.ModTime()) > lockedTempAge {
			_ = os.RemoveAll(p)
		}
	}
	// Remember's temp files of killed builds.
	if des, err := os.ReadDir(s.lastDir()); err == nil {
		for _, de := range des {
			if !strings.HasSuffix(de.Name(), ".tmp") {
				continue
			}
			if fi, err := de.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
				os.Remove(filepath.Join(s.lastDir(), de.Name()))
			}
		}
	}
}
