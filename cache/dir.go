package cache

import (
	"os"
	"path/filepath"
)

// DefaultDir is the one cache builds, tests and benchmarks share:
// $OSB_CACHE_DIR, else $XDG_CACHE_HOME/os-builder, else
// ~/.cache/os-builder.
func DefaultDir() string {
	if d := os.Getenv("OSB_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "os-builder")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "os-builder")
	}
	return filepath.Join(os.TempDir(), "os-builder-cache")
}
