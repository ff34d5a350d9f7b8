// Package cache is a content-addressed store of build step outputs, safe to
// share between concurrent builds (other PID namespaces included). An entry
// is a directory named by the digest of everything that went into it; it is
// filled aside under a lock, sealed with a record of its files, fsynced and
// renamed into place. A crash (kill -9 included) leaves either no entry or a
// complete one; an entry that no longer matches its seal is a miss.
//
// Layout: entries/KEY (complete entries), tmp/NAME + tmp/NAME.lock (work in
// progress; the flock on the .lock file says it is live), locks/KEY.lock
// (held by the one build filling KEY), last/ (inputs each step last ran
// with, for --explain).
package cache

import (
	"github.com/ironcore-dev/os-builder/internal/atomicfile"
	"github.com/ironcore-dev/os-builder/internal/boundedfile"

	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Input is one named ingredient of a step, by digest.
type Input struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// Inputs are everything a step's output depends on.
type Inputs []Input

// Add appends an input whose digest is the sha256 of value.
func (in *Inputs) Add(name, value string) {
	*in = append(*in, Input{Name: name, Digest: DigestString(value)})
}

// AddDigest appends an input with a precomputed digest.
func (in *Inputs) AddDigest(name, digest string) {
	*in = append(*in, Input{Name: name, Digest: digest})
}

// Key is the digest of all inputs, order-independent.
func (in Inputs) Key() string {
	sorted := append(Inputs(nil), in...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	h := sha256.New()
	for _, i := range sorted {
		fmt.Fprintf(h, "%s\x00%s\n", i.Name, i.Digest)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Diff names the inputs that differ between two input sets, for --explain.
func (in Inputs) Diff(prev Inputs) []string {
	old := map[string]string{}
	for _, i := range prev {
		old[i.Name] = i.Digest
	}
	var changed []string
	seen := map[string]bool{}
	for _, i := range in {
		seen[i.Name] = true
		d, ok := old[i.Name]
		switch {
		case !ok:
			changed = append(changed, i.Name+" (new)")
		case d != i.Digest:
			changed = append(changed, i.Name)
		}
	}
	for _, i := range prev {
		if !seen[i.Name] {
			changed = append(changed, i.Name+" (removed)")
		}
	}
	sort.Strings(changed)
	return changed
}

// DigestString is the hex sha256 of s.
func DigestString(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Meta describes an entry; it is written inside the entry, last, before the
// rename that makes the entry visible.
type Meta struct {
	Step    string    `json:"step"`
	Key     string    `json:"key"`
	Inputs  Inputs    `json:"inputs"`
	Created time.Time `json:"created"`
	// Format is sealFormat for sealed entries; entries without a seal
	// (written by older builders) are not trusted.
	Format int `json:"format,omitempty"`
	// Files is the seal: every file of the entry, see File.
	Files []File `json:"files,omitempty"`
}

const (
	metaFile = ".osb-cache-entry.json"
	// maxMetaSize bounds what Lookup reads of a meta file before parsing.
	maxMetaSize = 16 << 20
	// maxLastSize bounds a remembered input list.
	maxLastSize = 4 << 20
)

// Store is a cache directory.
type Store struct {
	Dir string
	// Log receives what the store recovers from by itself (a damaged entry,
	// a failed Remember, waiting for another build's fill); nil: silent.
	Log func(format string, args ...any)
}

// Open creates the store's directories and removes the leftovers of fills
// and work directories whose owner is gone (its lock is free).
func Open(dir string) (*Store, error) {
	s := &Store{Dir: dir}
	for _, d := range []string{s.entriesDir(), s.tmpDir(), s.lastDir(), s.locksDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cache: %w", err)
		}
	}
	s.sweep()
	return s, nil
}

func (s *Store) entriesDir() string { return filepath.Join(s.Dir, "entries") }
func (s *Store) tmpDir() string     { return filepath.Join(s.Dir, "tmp") }
func (s *Store) lastDir() string    { return filepath.Join(s.Dir, "last") }
func (s *Store) locksDir() string   { return filepath.Join(s.Dir, "locks") }

func (s *Store) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log(format, args...)
	}
}

// ErrInvalidKey marks a key that is not one Inputs.Key makes.
var ErrInvalidKey = errors.New("not a plain key (64 lowercase hex digits)")

// ValidKey checks that key is a plain cache key, as Inputs.Key makes it.
// Every path the store derives from a key (entry, fill lock) goes through
// it: keys also come from entries' meta files, which are not the store's
// to trust (a cache restored from elsewhere), and "../../x" as a key would
// name a path outside the cache.
func ValidKey(key string) error {
	if len(key) != sha256.Size*2 {
		return fmt.Errorf("cache key %q: %w", key, ErrInvalidKey)
	}
	for _, c := range key {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("cache key %q: %w", key, ErrInvalidKey)
		}
	}
	return nil
}

// entryPath is where the entry for a valid key lives.
func (s *Store) entryPath(key string) (string, error) {
	if err := ValidKey(key); err != nil {
		return "", err
	}
	return filepath.Join(s.entriesDir(), key), nil
}

// invalidEntry is what Path returns for an invalid key: inside entries/,
// and no entry is ever filled there.
const invalidEntry = "invalid-key"

// Path is where the entry for key lives (whether or not it exists). An
// invalid key (see ValidKey) gets entries/invalid-key, an entry that never
// exists, rather than a path it would make up.
func (s *Store) Path(key string) string {
	p, err := s.entryPath(key)
	if err != nil {
		return filepath.Join(s.entriesDir(), invalidEntry)
	}
	return p
}

// Lookup returns the entry directory for key if it is complete and matches
// its seal (file set, types, sizes, mtimes). A damaged entry is a miss: it
// is logged and the next Fill replaces it.
func (s *Store) Lookup(key string) (string, bool) {
	err := s.check(key, false)
	p := s.Path(key)
	switch {
	case err == nil:
		return p, true
	case !errors.Is(err, fs.ErrNotExist):
		s.logf("cache: entry %s is not usable, rebuilding it: %v", p, err)
	}
	return "", false
}

// Verify checks the entry for key against its seal including every file's
// sha256: the deep check that Lookup leaves out for speed.
func (s *Store) Verify(key string) error {
	return s.check(key, true)
}

func (s *Store) check(key string, contents bool) error {
	p, err := s.entryPath(key)
	if err != nil {
		return err
	}
	m, err := readMeta(p)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(p); serr == nil {
			return fmt.Errorf("%w: no %s", errDamaged, metaFile)
		}
	}
	if err != nil {
		return err
	}
	if m.Key != key {
		return fmt.Errorf("%s: key %q, want %q", metaFile, m.Key, key)
	}
	if m.Format != sealFormat && m.Format != sealFormatNoIdentity {
		return fmt.Errorf("%s: not sealed (format %d, want %d)", metaFile, m.Format, sealFormat)
	}
	resealed, err := checkSeal(p, m.Files, contents)
	if err != nil {
		return err
	}
	if resealed != nil || m.Format != sealFormat {
		// Every file whose identity changed hashed right: seal it anew,
		// so the next lookup is one lstat per file again.
		m.Format = sealFormat
		if resealed != nil {
			m.Files = resealed
		}
		s.reseal(key, p, m)
	}
	return nil
}

// reseal replaces an entry's meta file with m, under the entry's fill lock
// (no Fill or Prune replaces the entry meanwhile), written aside and renamed
// into place. It is an optimization: when the lock is busy or a write
// fails, the entry stays as it was (and is hashed again next time).
func (s *Store) reseal(key, entry string, m *Meta) {
	lock, err := s.keyLockPath(key)
	if err != nil {
		return
	}
	l, err := tryLock(lock, true)
	if err != nil {
		return
	}
	defer l.Close()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return
	}
	t, err := s.NewTemp("reseal")
	if err != nil {
		return
	}
	defer t.Remove()
	tmp := filepath.Join(t.Path, metaFile)
	if err := writeSynced(tmp, b); err != nil {
		s.logf("cache: entry %s: writing its new seal: %v", entry, err)
		return
	}
	if err := os.Rename(tmp, filepath.Join(entry, metaFile)); err != nil {
		s.logf("cache: entry %s: writing its new seal: %v", entry, err)
		return
	}
	_ = syncDir(entry)
	s.logf("cache: entry %s: sealed anew with its files' inodes and ctimes (each file whose identity changed, as in a copied or restored cache, matched its sha256)", entry)
}

// readMeta reads and parses an entry's meta file, bounded in size.
func readMeta(entry string) (*Meta, error) {
	b, err := boundedfile.Read(filepath.Join(entry, metaFile), maxMetaSize)
	if err != nil {
		return nil, err
	}
	return parseMeta(b)
}

func parseMeta(b []byte) (*Meta, error) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", metaFile, err)
	}
	seen := make(map[string]bool, len(m.Files))
	for i, f := range m.Files {
		if err := f.valid(); err != nil {
			return nil, fmt.Errorf("%s: files[%d]: %w", metaFile, i, err)
		}
		if seen[f.Path] {
			return nil, fmt.Errorf("%s: files[%d]: %s listed twice", metaFile, i, f.Path)
		}
		seen[f.Path] = true
	}
	if err := checkLinks(m.Files); err != nil {
		return nil, fmt.Errorf("%s: %w", metaFile, err)
	}
	return &m, nil
}

// Fill makes the entry for the inputs. Only one build fills a key at a
// time: the others wait for its lock and then find the entry (or, when the
// filler died, fill it themselves). fill writes into a fresh directory that
// is sealed, fsynced and renamed into place when fill succeeds.
func (s *Store) Fill(ctx context.Context, step string, in Inputs, fill func(dir string) error) (string, error) {
	return s.fill(ctx, step, in, fill, nil, nil)
}

// fill is Fill; check, when set, vets the new entry's seal before the
// entry becomes visible (Import: the seal must be the one it was given),
// and known are files whose sha256 fill checked as it wrote them.
func (s *Store) fill(ctx context.Context, step string, in Inputs, fill func(dir string) error, check func([]File) error, known map[string]File) (string, error) {
	key := in.Key()
	final, err := s.entryPath(key)
	if err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	keyLock, err := s.lockKey(ctx, key, step)
	if err != nil {
		return "", err
	}
	defer keyLock.Close()
	err = s.check(key, false)
	if err == nil {
		return final, nil // another build filled it while we waited
	}
	damaged := !errors.Is(err, fs.ErrNotExist)

	t, err := s.NewTemp("fill")
	if err != nil {
		return "", err
	}
	defer t.Remove()
	if err := fill(t.Path); err != nil {
		return "", err
	}
	files, err := sealKnown(t.Path, known)
	if err != nil {
		return "", fmt.Errorf("cache: seal %s: %w", step, err)
	}
	if check != nil {
		if err := check(files); err != nil {
			return "", err
		}
	}
	meta, err := json.MarshalIndent(Meta{Step: step, Key: key, Inputs: in, Created: time.Now().UTC(), Format: sealFormat, Files: files}, "", "  ")
	if err != nil {
		return "", err
	}
	if err := writeSynced(filepath.Join(t.Path, metaFile), meta); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if err := syncDir(t.Path); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	if damaged {
		if err := s.discard(final); err != nil {
			return "", fmt.Errorf("cache: replace damaged entry: %w", err)
		}
	}
	if err := os.Rename(t.Path, final); err != nil {
		if s.check(key, false) == nil { // a builder without the key lock got there first
			return final, nil
		}
		return "", fmt.Errorf("cache: %w", err)
	}
	if err := syncDir(s.entriesDir()); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	return final, nil
}

// discard moves dir into a locked temp directory and removes it there, so
// no reader sees it half deleted and a crash leaves it to the sweeper.
func (s *Store) discard(dir string) error {
	t, err := s.NewTemp("discard")
	if err != nil {
		return err
	}
	defer t.Remove()
	if err := os.Rename(dir, filepath.Join(t.Path, "doomed")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// writeSynced writes data to path and fsyncs it.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Remember records the inputs a step last ran with, so a later miss can say
// what changed. scope separates recipes. Concurrent builds may Remember the
// same step: each writes its own temp file and renames it into place.
func (s *Store) Remember(scope, step string, in Inputs) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	p := s.lastPath(scope, step)
	if err := atomicfile.WriteFile(p, b, 0o644); err != nil {
		return fmt.Errorf("cache remember %s: %w", p, err)
	}
	return nil
}

func (s *Store) lastPath(scope, step string) string {
	return filepath.Join(s.lastDir(), sanitize(scope)+"--"+sanitize(step)+".json")
}

// Previous returns the inputs a step last ran with, if known.
func (s *Store) Previous(scope, step string) (Inputs, bool) {
	b, err := boundedfile.Read(s.lastPath(scope, step), maxLastSize)
	if err != nil {
		return nil, false
	}
	var in Inputs
	if json.Unmarshal(b, &in) != nil {
		return nil, false
	}
	return in, true
}

// Entry is one cache entry, as listed by `builder cache ls`.
type Entry struct {
	Meta
	Path string    `json:"path"`
	Size int64     `json:"size"`
	Used time.Time `json:"used"`
}

// List returns every entry with a readable meta file, newest first. Entries
// whose name or meta key is not a plain key of their own are left out
// (and logged): see scan.
func (s *Store) List() ([]Entry, error) {
	entries, skipped, err := s.scan()
	for _, err := range skipped {
		s.logf("%v", err)
	}
	return entries, err
}

// scan lists the entries with a readable meta file, newest first, and
// says which entries it skipped and why: one whose directory name is not
// a plain key, whose meta key is not one, or whose meta key is another
// entry's. No file was ever put there by Fill; the store derives no path
// from them (a lock named by "../../x" is outside the cache).
func (s *Store) scan() (entries []Entry, skipped []error, err error) {
	des, err := os.ReadDir(s.entriesDir())
	if err != nil {
		return nil, nil, fmt.Errorf("cache: %w", err)
	}
	for _, de := range des {
		p := filepath.Join(s.entriesDir(), de.Name())
		if err := ValidKey(de.Name()); err != nil {
			skipped = append(skipped, fmt.Errorf("cache: skipped entry %s: its name: %w", p, err))
			continue
		}
		m, err := readMeta(p)
		if err != nil {
			continue
		}
		if err := ValidKey(m.Key); err != nil {
			skipped = append(skipped, fmt.Errorf("cache: skipped entry %s: its %s: %w", p, metaFile, err))
			continue
		}
		if m.Key != de.Name() {
			skipped = append(skipped, fmt.Errorf("cache: skipped entry %s: its %s names another entry's key %s", p, metaFile, m.Key))
			continue
		}
		e := Entry{Meta: *m, Path: p, Size: dirSize(p)}
		e.Files = nil // the seal is for Lookup, not for listing
		if fi, err := os.Stat(p); err == nil {
			e.Used = fi.ModTime()
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Created.After(entries[j].Created) })
	return entries, skipped, nil
}

// Touch marks an entry as used now, for prune's least-recently-used order.
// Only the entry directory's own times change; the seal leaves them out.
func (s *Store) Touch(key string) {
	p, err := s.entryPath(key)
	if err != nil {
		return
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now)
}

// Prune removes entries not used within maxAge (all entries when maxAge is
// zero) and returns how many bytes it freed. Entries a build is filling
// right now are left alone. Entries that are not the store's own (see
// scan) are left alone too, and the error names each with the reason,
// after everything else is pruned: a planted entry is for a human to look
// at, not for prune to act on.
func (s *Store) Prune(maxAge time.Duration) (int64, error) {
	entries, skipped, err := s.scan()
	if err != nil {
		return 0, err
	}
	var freed int64
	for _, e := range entries {
		if maxAge > 0 && time.Since(e.Used) < maxAge {
			continue
		}
		lock, err := s.keyLockPath(e.Key)
		if err != nil {
			return freed, fmt.Errorf("cache prune: %w", err)
		}
		l, err := tryLock(lock, true)
		if errors.Is(err, errBusy) {
			continue
		}
		if err != nil {
			return freed, fmt.Errorf("cache prune: %w", err)
		}
		err = s.discard(e.Path)
		os.Remove(l.Name())
		l.Close()
		if err != nil {
			return freed, fmt.Errorf("cache prune: %w", err)
		}
		freed += e.Size
	}
	if len(skipped) > 0 {
		return freed, fmt.Errorf("cache prune: %w (remove such entries by hand)", errors.Join(skipped...))
	}
	return freed, nil
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == ' ' {
			return '_'
		}
		return r
	}, s)
}
