package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/boundedfile"
	"github.com/ironcore-dev/os-builder/osimage"
)

// Artifact reuse. A build whose input key differs from its output's still
// shares most inputs with it when the change is narrow: a new kernel
// command line leaves the root image and the live initrd as they were, a
// larger data partition changes only the disk. Each artifact writer has a
// key: a digest of what it reads (the cache entries it reads from, named by
// their own keys, the options it applies, the builder executable). The seal
// of an output records, beside each artifact's identity, the key of the
// writer that made it. A writer whose key matches the one recorded for
// every file it ships, in an output the seal still vouches for (each file's
// inode, ctime and size as written), takes those files by hard link into
// the staging directory instead of writing them again; the manifest's
// digests come along. Without a cache (--no-cache) the inputs are not
// named by keys and nothing is reused.

// previousOutput is what an earlier output directory offers for reuse.
type previousOutput struct {
	dir  string
	arts map[string]previousArtifact // by file name
}

type previousArtifact struct {
	art osimage.Artifact
	key string
	id  sealedFile // as sealed and found when the output was read
}

// readPreviousOutput returns the artifacts of the output directory dir
// that its seal vouches for and that have a writer key; nil when there
// are none.
func readPreviousOutput(store *cache.Store, dir string) *previousOutput {
	data, err := boundedfile.Read(filepath.Join(dir, osimage.ManifestFile), maxManifestSize)
	if err != nil {
		return nil
	}
	sealData, err := boundedfile.Read(sealPath(store, dir), maxSealSize)
	if err != nil {
		return nil
	}
	return previousFrom(dir, data, sealData)
}

// previousFrom is readPreviousOutput on the output directory dir's
// manifest and seal as read.
func previousFrom(dir string, data, sealData []byte) *previousOutput {
	if _, err := parseOutputManifest(data); err != nil {
		return nil
	}
	var m osimage.BuildManifest
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	var s seal
	if json.Unmarshal(sealData, &s) != nil || s.Output != dir {
		return nil
	}
	if sum := sha256.Sum256(data); s.Manifest != hex.EncodeToString(sum[:]) {
		return nil
	}
	byName := map[string]osimage.Artifact{}
	for _, a := range m.Artifacts {
		byName[a.Path] = a
	}
	prev := &previousOutput{dir: dir, arts: map[string]previousArtifact{}}
	for _, f := range s.Files {
		a, ok := byName[f.Path]
		if f.Key == "" || !ok || a.Size != f.Size {
			continue
		}
		id, err := identity(filepath.Join(dir, f.Path))
		if err != nil || !id.sameFile(f) {
			continue
		}
		prev.arts[f.Path] = previousArtifact{art: a, key: f.Key, id: id}
	}
	if len(prev.arts) == 0 {
		return nil
	}
	return prev
}

// has reports whether the previous output has the files names, made by a
// writer with key.
func (p *previousOutput) has(key string, names []string) bool {
	if p == nil || len(names) == 0 {
		return false
	}
	for _, n := range names {
		if a, ok := p.arts[n]; !ok || a.key != key {
			return false
		}
	}
	return true
}

// errNotReusable: the previous output has not got every file with the key.
var errNotReusable = errors.New("not in the previous output")

// reuse links the files names, made by a writer with key, from the
// previous output into stage and returns their manifest entries. The
// output was read when the build started, minutes before: a file since
// replaced or changed is not reusable, and nothing is left in stage then.
func (p *previousOutput) reuse(stage, key string, names []string) ([]osimage.Artifact, error) {
	if !p.has(key, names) {
		return nil, errNotReusable
	}
	var arts []osimage.Artifact
	for _, n := range names {
		arts = append(arts, p.arts[n].art)
	}
	for i, n := range names {
		if err := linkSealed(filepath.Join(p.dir, n), filepath.Join(stage, n), p.arts[n].id); err != nil {
			for _, done := range names[:i] {
				os.Remove(filepath.Join(stage, done))
			}
			return nil, fmt.Errorf("reuse %s: %w", n, err)
		}
	}
	return arts, nil
}

// linkReuseHook, when set (tests), runs between linkSealed's check and its
// link: where a replacement would slip in.
var linkReuseHook func(src string)

// linkSealed hard-links src to dst if src is still the file the seal
// names (device, inode, ctime, size). The link goes by path, so it is
// checked again after: not against the seal's ctime, which link(2) itself
// sets, but against the inode checked, held open so that no new file can
// take its number: same device, inode, size and mtime. A write in place
// between the check and the link with its mtime set back would pass, as
// would one between the link and the output's new seal: no check closes
// that for reused or freshly written files alike.
func linkSealed(src, dst string, sealed sealedFile) error {
	f, err := os.OpenFile(src, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: %w", errNotReusable, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w: %w", errNotReusable, err)
	}
	before, err := identityOf(src, fi)
	if err != nil || !before.sameFile(sealed) {
		return fmt.Errorf("%w: changed since the build started", errNotReusable)
	}
	if linkReuseHook != nil {
		linkReuseHook(src)
	}
	if err := os.Link(src, dst); err != nil {
		return err
	}
	lfi, err := os.Lstat(dst)
	var after sealedFile
	if err == nil {
		after, err = identityOf(dst, lfi)
	}
	if err != nil || after.Dev != before.Dev || after.Ino != before.Ino || after.Size != before.Size || !lfi.ModTime().Equal(fi.ModTime()) {
		os.Remove(dst)
		return fmt.Errorf("%w: replaced while linking", errNotReusable)
	}
	return nil
}
