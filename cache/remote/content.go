package remote

import (
	"fmt"
	"io/fs"
	"os"
	"strconv"

	"github.com/ironcore-dev/os-builder/cache"
)

// What a pulled entry may hold, checked on its seal before anything is
// downloaded: its size and file count within the limits, and no mode that
// lets the entry's files run as their owner or be changed by anyone (the
// local store seals what a local step made as it is). Its symlinks stay
// inside it (cache.ParseSeal checks them).

const (
	// DefaultMaxEntryFiles bounds an entry's files, directories and
	// symlinks together (a kernel's entry has about 130; the manifest's
	// bound allows some 30,000 layers).
	DefaultMaxEntryFiles = 20_000
	// DefaultMaxEntryBytes bounds the sum of an entry's file sizes (a
	// bootstrap's entry is a few hundred MB).
	DefaultMaxEntryBytes = 32 << 30

	// MaxEntryFilesEnv and MaxEntryBytesEnv override the defaults.
	MaxEntryFilesEnv = "OSB_CACHE_MAX_ENTRY_FILES"
	MaxEntryBytesEnv = "OSB_CACHE_MAX_ENTRY_BYTES"
)

// unsafeModes are the bits no pulled file or directory may have.
const unsafeModes = fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// limits are the bounds on a pulled entry.
type limits struct {
	files int64
	bytes int64
}

// entryLimits reads the limits: the defaults, or the environment's.
func entryLimits() (limits, error) {
	l := limits{files: DefaultMaxEntryFiles, bytes: DefaultMaxEntryBytes}
	for _, v := range []struct {
		env string
		to  *int64
	}{{MaxEntryFilesEnv, &l.files}, {MaxEntryBytesEnv, &l.bytes}} {
		s := os.Getenv(v.env)
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return limits{}, fmt.Errorf("$%s=%q: not a count (a whole number, 0 or more)", v.env, s)
		}
		*v.to = n
	}
	return l, nil
}

// checkContent checks a pulled seal against the limits and for unsafe
// modes.
func checkContent(seal *cache.Meta) error {
	l, err := entryLimits()
	if err != nil {
		return err
	}
	if n := int64(len(seal.Files)); n > l.files {
		return fmt.Errorf("seal: %d files, more than the %d allowed ($%s)", n, l.files, MaxEntryFilesEnv)
	}
	var total int64
	for i, f := range seal.Files {
		if err := checkMode(f); err != nil {
			return fmt.Errorf("seal: files[%d] %s: %w", i, f.Path, err)
		}
		if f.Kind() != "file" {
			continue
		}
		// Sizes are not negative (ParseSeal); bounded each, the sum of
		// a seal's files (under 16 MiB of JSON) cannot overflow.
		if f.Size > maxFileSize {
			return fmt.Errorf("seal: files[%d] %s: %d bytes, more than %d", i, f.Path, f.Size, int64(maxFileSize))
		}
		total += f.Size
	}
	if total > l.bytes {
		return fmt.Errorf("seal: %d bytes, more than the %d allowed ($%s)", total, l.bytes, MaxEntryBytesEnv)
	}
	return nil
}

// checkMode refuses setuid, setgid and sticky bits, and a world-writable
// file or directory (a symlink's own permissions mean nothing).
func checkMode(f cache.File) error {
	if m := f.Mode & unsafeModes; m != 0 {
		return fmt.Errorf("mode %v: setuid, setgid or sticky bits are not taken from a remote cache", f.Mode)
	}
	if f.Kind() != "symlink" && f.Mode.Perm()&0o002 != 0 {
		return fmt.Errorf("mode %v: world-writable", f.Mode)
	}
	return nil
}
