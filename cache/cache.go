// Package cache is a content-addressed store of build step outputs. An entry
// is a directory named by the digest of everything that went into it; it is
// filled aside and renamed into place, so a crash (kill -9 included) leaves
// either no entry or a complete one, never a poisoned one.
package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
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

// Meta describes an entry; it is written inside the entry before the rename.
type Meta struct {
	Step    string    `json:"step"`
	Key     string    `json:"key"`
	Inputs  Inputs    `json:"inputs"`
	Created time.Time `json:"created"`
}

const metaFile = ".osb-cache-entry.json"

// Store is a cache directory.
type Store struct {
	Dir string
}

// Open creates the store's directories and removes the leftovers of fills
// whose process is gone (an interrupted build).
func Open(dir string) (*Store, error) {
	s := &Store{Dir: dir}
	for _, d := range []string{s.entriesDir(), s.tmpDir(), s.lastDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("cache: %w", err)
		}
	}
	s.removeStaleTemps()
	return s, nil
}

func (s *Store) entriesDir() string { return filepath.Join(s.Dir, "entries") }
func (s *Store) tmpDir() string     { return filepath.Join(s.Dir, "tmp") }
func (s *Store) lastDir() string    { return filepath.Join(s.Dir, "last") }

// Path is where the entry for key lives (whether or not it exists).
func (s *Store) Path(key string) string { return filepath.Join(s.entriesDir(), key) }

// Lookup returns the entry directory for key if it is complete.
func (s *Store) Lookup(key string) (string, bool) {
	p := s.Path(key)
	if _, err := os.Stat(filepath.Join(p, metaFile)); err != nil {
		return "", false
	}
	return p, true
}

// Fill runs fill into a fresh temporary directory and, when it succeeds,
// renames that directory into place as the entry for the inputs.
func (s *Store) Fill(step string, in Inputs, fill func(dir string) error) (string, error) {
	key := in.Key()
	tmp, err := os.MkdirTemp(s.tmpDir(), fmt.Sprintf("%d-", os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := fill(tmp); err != nil {
		return "", err
	}
	meta, err := json.MarshalIndent(Meta{Step: step, Key: key, Inputs: in, Created: time.Now().UTC()}, "", "  ")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(tmp, metaFile), meta, 0o644); err != nil {
		return "", fmt.Errorf("cache: %w", err)
	}
	syncDir(tmp)
	final := s.Path(key)
	if err := os.Rename(tmp, final); err != nil {
		if _, ok := s.Lookup(key); ok { // a concurrent build filled it first
			return final, nil
		}
		return "", fmt.Errorf("cache: %w", err)
	}
	syncDir(s.entriesDir())
	return final, nil
}

// Remember records the inputs a step last ran with, so a later miss can say
// what changed. scope separates recipes.
func (s *Store) Remember(scope, step string, in Inputs) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	p := filepath.Join(s.lastDir(), sanitize(scope)+"--"+sanitize(step)+".json")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Previous returns the inputs a step last ran with, if known.
func (s *Store) Previous(scope, step string) (Inputs, bool) {
	b, err := os.ReadFile(filepath.Join(s.lastDir(), sanitize(scope)+"--"+sanitize(step)+".json"))
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

// List returns every complete entry, newest first.
func (s *Store) List() ([]Entry, error) {
	des, err := os.ReadDir(s.entriesDir())
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	var out []Entry
	for _, de := range des {
		p := filepath.Join(s.entriesDir(), de.Name())
		b, err := os.ReadFile(filepath.Join(p, metaFile))
		if err != nil {
			continue
		}
		var e Entry
		if json.Unmarshal(b, &e.Meta) != nil {
			continue
		}
		e.Path = p
		e.Size = dirSize(p)
		if fi, err := os.Stat(p); err == nil {
			e.Used = fi.ModTime()
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// Touch marks an entry as used now, for prune's least-recently-used order.
func (s *Store) Touch(key string) {
	now := time.Now()
	_ = os.Chtimes(s.Path(key), now, now)
}

// Prune removes entries not used within maxAge (all entries when maxAge is
// zero) and returns how many bytes it freed.
func (s *Store) Prune(maxAge time.Duration) (int64, error) {
	entries, err := s.List()
	if err != nil {
		return 0, err
	}
	var freed int64
	for _, e := range entries {
		if maxAge > 0 && time.Since(e.Used) < maxAge {
			continue
		}
		// Rename first so a concurrent reader never sees a half-deleted entry.
		doomed := filepath.Join(s.tmpDir(), fmt.Sprintf("%d-prune-%s", os.Getpid(), e.Key))
		if err := os.Rename(e.Path, doomed); err != nil {
			return freed, fmt.Errorf("cache prune: %w", err)
		}
		if err := os.RemoveAll(doomed); err != nil {
			return freed, fmt.Errorf("cache prune: %w", err)
		}
		freed += e.Size
	}
	return freed, nil
}

func (s *Store) removeStaleTemps() {
	des, err := os.ReadDir(s.tmpDir())
	if err != nil {
		return
	}
	for _, de := range des {
		pid, err := strconv.Atoi(strings.SplitN(de.Name(), "-", 2)[0])
		if err == nil && pid != os.Getpid() && processAlive(pid) {
			continue
		}
		if pid == os.Getpid() {
			continue
		}
		_ = os.RemoveAll(filepath.Join(s.tmpDir(), de.Name()))
	}
}

func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
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

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		f.Close()
	}
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r == ' ' {
			return '_'
		}
		return r
	}, s)
}
