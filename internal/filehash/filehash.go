// Package filehash hashes files: the hex sha256 of a file's contents, the
// same with the file fsynced (for files about to be renamed into a cache
// where they must be whole after a crash), and a tree's paths, modes and
// contents (Tree).
package filehash

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// SHA256 is the hex sha256 of the contents of the file at path.
func SHA256(path string) (string, error) {
	return hash(path, false)
}

// SHA256Sync is SHA256, with the file fsynced once read.
func SHA256Sync(path string) (string, error) {
	return hash(path, true)
}

func hash(path string, sync bool) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			return "", fmt.Errorf("fsync %s: %w", path, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
