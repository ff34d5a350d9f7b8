// Package atomicfile replaces files in one rename: a reader sees the old
// content or the whole new content, never a part, and a crash or a failed
// write leaves nothing under the final name. Temp files get unique names
// beside the target, so concurrent writers of one path never share one.
package atomicfile

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// TempSuffix ends every temp file name, so a sweeper can recognise the
// leftovers of killed writers.
const TempSuffix = ".tmp"

// Write runs fill on a new temp file beside path, syncs it, gives it mode
// and renames it to path, then syncs the directory. On any failure the temp
// file is removed and path is untouched.
func Write(path string, mode fs.FileMode, fill func(*os.File) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*"+TempSuffix)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Chmod(mode); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", f.Name(), err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", f.Name(), err)
	}
	if err = os.Rename(f.Name(), path); err != nil {
		return err
	}
	// Make the rename durable too; a failure here does not undo the write.
	if d, derr := os.Open(filepath.Dir(path)); derr == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// WriteFile is Write for bytes in memory.
func WriteFile(path string, data []byte, mode fs.FileMode) error {
	return Write(path, mode, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}
