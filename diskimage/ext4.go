package diskimage

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// toolPath is where mke2fs is looked up: the sbin directories are not on
// every user's PATH.
const toolPath = "/usr/sbin:/sbin:/usr/bin:/bin"

// mke2fsBinary finds mke2fs (package e2fsprogs).
func mke2fsBinary() (string, error) {
	for _, dir := range strings.Split(toolPath, ":") {
		p := dir + "/mke2fs"
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("mke2fs"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("mke2fs not found (install e2fsprogs)")
}

// ext4Image is an empty, labelled ext4 file system made reproducibly: the
// UUID and directory hash seed are derived from the seed, and every time
// stamp is the source date epoch (E2FSPROGS_FAKE_TIME).
type ext4Image struct {
	Label    string
	Seed     string
	Epoch    int64
	SizeByte int64
}

// format makes the file system in the regular file path (created or
// truncated to the size).
func (e ext4Image) format(path string) error {
	mke2fs, err := mke2fsBinary()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		return err
	}
	if err := os.Truncate(path, e.SizeByte); err != nil {
		return err
	}
	uuid := seededGUID(e.Seed, "ext4-uuid:"+e.Label)
	hashSeed := seededGUID(e.Seed, "ext4-hash-seed:"+e.Label)
	// -T default and -b 4096 whatever the size (small file systems would
	// get 1 KiB blocks), as the partition is grown at first boot; -m 0: the
	// data partition holds no system files that need reserved blocks.
	cmd := exec.Command(mke2fs, "-q", "-F", "-t", "ext4", "-T", "default", "-b", "4096", "-m", "0",
		"-L", e.Label, "-U", uuid,
		"-E", "hash_seed="+hashSeed+",root_owner=0:0,nodiscard,lazy_itable_init=1",
		path, strconv.FormatInt(e.SizeByte/1024, 10)+"k")
	cmd.Env = []string{
		"PATH=" + toolPath,
		"E2FSPROGS_FAKE_TIME=" + strconv.FormatInt(e.Epoch, 10),
		"SOURCE_DATE_EPOCH=" + strconv.FormatInt(e.Epoch, 10),
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
