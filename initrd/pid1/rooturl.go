package pid1

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// ImageDir is the tmpfs a fetched root image is kept in. It is under /run,
// which moves into the final root, so the loop device's backing file stays
// reachable (and visible) after the switch.
const ImageDir = "/run/osb/image"

// fetchRoot downloads the root image into RAM and returns its path. The
// digest is checked before the file is used: a mismatch leaves nothing
// mounted.
func (i *initProcess) fetchRoot(url, sha string) (string, error) {
	if err := os.MkdirAll(ImageDir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", ImageDir, err)
	}
	// A tmpfs of its own: /run's size limit is meant for runtime files.
	if err := unix.Mount("tmpfs", ImageDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0700,size=90%"); err != nil {
		return "", fmt.Errorf("mount tmpfs on %s: %w", ImageDir, err)
	}
	dst := filepath.Join(ImageDir, "root.img")
	f, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", fmt.Errorf("create %s: %w", dst, err)
	}
	defer f.Close()
	if _, err := i.fetchVerified(url, sha, &fileSink{f: f}); err != nil {
		f.Close()
		os.Remove(dst) // give the RAM back
		return "", fmt.Errorf("osb.root: %w", err)
	}
	if err := f.Chmod(0o400); err != nil {
		return "", err
	}
	return dst, nil
}

func fallocate(f *os.File, size int64) error {
	return unix.Fallocate(int(f.Fd()), 0, 0, size)
}
