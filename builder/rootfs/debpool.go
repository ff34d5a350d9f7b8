package rootfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/ironcore-dev/os-builder/internal/filehash"

	"github.com/ironcore-dev/os-builder/cache"
)

// The deb pool keeps the .debs that bootstraps downloaded, like mkosi's
// Cache=, so the next bootstrap of an overlapping package set downloads only
// what is new. It lives in the builder's cache directory:
//
//	debs/KEY/SHA256_PACKAGE_VERSION_ARCH.deb
//
// KEY is a digest of the mirror and release (one archive never has two
// different files for one package, version and architecture; two archives
// may). A pool file is named by the sha256 of its contents and is only ever
// created whole (written aside, fsynced, renamed into place), so concurrent
// builds and kill -9 leave complete files or none.
//
// Trust: apt checks a .deb it finds in /var/cache/apt/archives only by its
// size, not by the hashes of the signed index (TestAptTrustsCachedDebBySize shows
// it). So every pool file is hashed against its name each time it is handed
// to mmdebstrap, and a file that does not match is dropped from the pool and
// downloaded again. What enters the pool was downloaded and checked against
// the signed index by apt in the bootstrap that publishes it.
const debPoolDir = "debs"

// DebPoolDir is where the deb pool of a cache directory lives.
func DebPoolDir(cacheDir string) string { return filepath.Join(cacheDir, debPoolDir) }

// debPool is the part of the pool one bootstrap uses (one mirror and release).
type debPool struct {
	dir string
}

func newDebPool(cacheDir, mirror, release string) *debPool {
	key := cache.DigestString(mirror + "\n" + release)[:16]
	return &debPool{dir: filepath.Join(DebPoolDir(cacheDir), key)}
}

// A .deb as apt names it in its archives: PACKAGE_VERSION_ARCH.deb, the
// version's epoch colon escaped as %3a.
var debName = regexp.MustCompile(`^([a-z0-9][a-z0-9+.-]*)_([A-Za-z0-9.+~%-]+)_([a-z0-9-]+)\.deb$`)

// poolName splits a pool file name into its sha256 and apt's name.
func poolName(name string) (sum, deb string, ok bool) {
	if len(name) < 66 || name[64] != '_' || !isHex(name[:64]) || !debName.MatchString(name[65:]) {
		return "", "", false
	}
	return name[:64], name[65:], true
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// stage hard-links every pool file into dir under apt's name and keeps those
// whose contents match their name; a damaged pool file is removed from the
// pool. The link is made first and the link hashed, so a file replaced in
// the pool meanwhile cannot slip through. It returns how many files it
// staged.
func (p *debPool) stage(dir string, logf func(string, ...any)) (int, error) {
	des, err := os.ReadDir(p.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("deb pool: %w", err)
	}
	now := time.Now()
	n := 0
	for _, de := range des {
		sum, deb, ok := poolName(de.Name())
		if !ok || !de.Type().IsRegular() {
			continue
		}
		src, dst := filepath.Join(p.dir, de.Name()), filepath.Join(dir, deb)
		if _, err := os.Lstat(dst); err == nil {
			continue // the same package version twice: one is enough
		}
		if err := os.Link(src, dst); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue // pruned or superseded meanwhile
			}
			return n, fmt.Errorf("deb pool: %w", err)
		}
		got, err := filehash.SHA256(dst)
		if err != nil {
			return n, fmt.Errorf("deb pool: %w", err)
		}
		if got != sum {
			logf("deb pool: %s does not match its sha256, dropping it (it is downloaded again)", src)
			os.Remove(dst)
			os.Remove(src)
			continue
		}
		// The pool's own clock for `cache prune --older-than`: last use.
		_ = os.Chtimes(src, now, now)
		n++
	}
	return n, nil
}

// publish moves the .debs in dir, downloaded by the bootstrap that just
// finished (apt checked them against the signed index), into the pool, and
// removes the pool's other versions of the same packages: the index now
// names these.
func (p *debPool) publish(dir string) (int, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("deb pool: %w", err)
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return 0, fmt.Errorf("deb pool: %w", err)
	}
	published := map[string]string{} // package_arch -> pool name
	for _, de := range des {
		m := debName.FindStringSubmatch(de.Name())
		if m == nil || !de.Type().IsRegular() {
			continue
		}
		src := filepath.Join(dir, de.Name())
		sum, err := filehash.SHA256Sync(src)
		if err != nil {
			return len(published), fmt.Errorf("deb pool: %w", err)
		}
		name := sum + "_" + de.Name()
		if err := os.Rename(src, filepath.Join(p.dir, name)); err != nil {
			return len(published), fmt.Errorf("deb pool: %w", err)
		}
		published[m[1]+"_"+m[3]] = name
	}
	if len(published) == 0 {
		return 0, nil
	}
	if err := syncPath(p.dir); err != nil {
		return len(published), fmt.Errorf("deb pool: %w", err)
	}
	// Superseded versions go; a build that staged one keeps its link.
	des, err = os.ReadDir(p.dir)
	if err != nil {
		return len(published), fmt.Errorf("deb pool: %w", err)
	}
	for _, de := range des {
		_, deb, ok := poolName(de.Name())
		if !ok {
			continue
		}
		m := debName.FindStringSubmatch(deb)
		if name, ok := published[m[1]+"_"+m[3]]; ok && name != de.Name() {
			os.Remove(filepath.Join(p.dir, de.Name()))
		}
	}
	return len(published), nil
}

// PruneDebs removes the pool's .debs not used within maxAge (all of them
// when maxAge is zero) and returns the bytes freed. A build that staged a
// file keeps its own link to it.
func PruneDebs(cacheDir string, maxAge time.Duration) (int64, error) {
	root := DebPoolDir(cacheDir)
	keys, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("deb pool: %w", err)
	}
	var freed int64
	for _, k := range keys {
		if !k.IsDir() {
			continue
		}
		dir := filepath.Join(root, k.Name())
		des, err := os.ReadDir(dir)
		if err != nil {
			return freed, fmt.Errorf("deb pool: %w", err)
		}
		for _, de := range des {
			fi, err := de.Info()
			if err != nil {
				continue
			}
			if maxAge > 0 && time.Since(fi.ModTime()) < maxAge {
				continue
			}
			if err := os.Remove(filepath.Join(dir, de.Name())); err == nil && fi.Mode().IsRegular() {
				freed += fi.Size()
			}
		}
		os.Remove(dir) // only when empty
	}
	return freed, nil
}

func syncPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
