package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"github.com/ironcore-dev/os-builder/internal/boundedfile"
	"github.com/ironcore-dev/os-builder/internal/filehash"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// The nothing-changed fast path. A build's input key digests everything it
// reads before any step runs: the resolved recipe, the contents of its
// files and units, the keys of the steps that read outside inputs
// (bootstrap, go, oci, init: package set, module versions, toolchain,
// init source), the signing key and the builder executable itself (its
// step versions and writers). The manifest records it. When the output
// directory's manifest has the same key and its artifacts are the ones the
// manifest describes, the build writes nothing and stops.
//
// "The ones it describes" is checked without reading them: after the swap
// the build records, in the cache directory, each artifact's device, inode
// and change time (ctime) beside the manifest's sha256. Any write, truncate,
// chmod or replacement of a file changes its ctime or inode, and ctime
// cannot be set back from user space, so an unchanged (inode, ctime, size)
// means unchanged contents; checking it is one lstat per file, microseconds
// for the GiB of the hypervisor's artifacts, where hashing them takes
// seconds. A missing or stale seal (an output copied elsewhere, a seal
// from another output) costs one full hash, after which the seal is
// rewritten; --verify always hashes.

// inputKey is the build's input key (see above).
func (b *buildRun) inputKey() (string, error) {
	var in cache.Inputs
	in.AddDigest("builder", b.exe)
	rendered, err := recipe.Render(b.r, "json")
	if err != nil {
		return "", fmt.Errorf("input key: %w", err)
	}
	in.Add("recipe", string(rendered))
	for _, f := range b.r.Files() {
		d, err := filehash.SourceTree(f.Source)
		if err != nil {
			return "", fmt.Errorf("file %s: %w", f.Source, err)
		}
		in.AddDigest("file:"+f.Destination, d)
	}
	for _, u := range b.r.Units() {
		d, err := filehash.SHA256(u.Path)
		if err != nil {
			return "", fmt.Errorf("unit %s: %w", u.Name, err)
		}
		in.AddDigest("unit:"+u.Name, d)
	}
	ns, _ := b.table("")
	for _, n := range ns {
		if n.writer != nil || len(n.needs) > 0 {
			continue // made of the steps before it and the inputs above
		}
		s, err := n.step()
		if err != nil {
			return "", err
		}
		si, err := s.Inputs()
		if err != nil {
			return "", fmt.Errorf("%s: inputs: %w", n.name, err)
		}
		in.AddDigest("step:"+n.name, si.Key())
	}
	in.Add("cmdline", b.cmdline())
	in.Add("source-date-epoch", strconv.FormatInt(b.epoch, 10))
	for name, p := range map[string]string{"sign-key": b.opts.SignKey, "sign-cert": b.opts.SignCert} {
		if p == "" {
			continue
		}
		d, err := filehash.SHA256(p)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		in.AddDigest(name, d)
	}
	return in.Key(), nil
}

var exeDigest = sync.OnceValues(func() (string, error) {
	p, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filehash.SHA256(p)
})

// executableDigest is the sha256 of the running builder, hashed once per
// process.
func executableDigest() (string, error) { return exeDigest() }

// seal is what the build recorded about an output directory it wrote.
type seal struct {
	Output   string       `json:"output"`
	Manifest string       `json:"manifest"` // sha256 of manifest.json
	Files    []sealedFile `json:"files"`
}

type sealedFile struct {
	Path  string `json:"path"`
	Size  int64  `json:"size"`
	Dev   uint64 `json:"dev"`
	Ino   uint64 `json:"ino"`
	Ctime int64  `json:"ctimeNs"`
	// Key is the key of the writer that made the file (reuse.go).
	Key string `json:"key,omitempty"`
}

// sameFile: f and g name the same, unchanged file.
func (f sealedFile) sameFile(g sealedFile) bool {
	f.Key, g.Key = "", ""
	return f == g
}

// maxSealSize bounds a seal file; a real one is a few hundred bytes.
const maxSealSize = 1 << 20

func sealPath(store *cache.Store, output string) string {
	sum := sha256.Sum256([]byte(output))
	return filepath.Join(store.Dir, "outputs", hex.EncodeToString(sum[:16])+".json")
}

func identity(p string) (sealedFile, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return sealedFile{}, err
	}
	return identityOf(p, fi)
}

// identityOf is the identity of p, a regular file that fi describes.
func identityOf(p string, fi fs.FileInfo) (sealedFile, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return sealedFile{}, fmt.Errorf("%s: not a regular file", p)
	}
	return sealedFile{Path: filepath.Base(p), Size: fi.Size(), Dev: uint64(st.Dev), Ino: st.Ino, Ctime: st.Ctim.Nano()}, nil
}

// writeSeal records the identity of output's artifacts (see above) and
// the keys of the writers that made them (keys, by file name).
func writeSeal(store *cache.Store, output string, manifest []byte, arts []osimage.Artifact, keys map[string]string) error {
	sum := sha256.Sum256(manifest)
	s := seal{Output: output, Manifest: hex.EncodeToString(sum[:])}
	for _, a := range arts {
		id, err := identity(filepath.Join(output, a.Path))
		if err != nil {
			return fmt.Errorf("seal %s: %w", output, err)
		}
		id.Key = keys[a.Path]
		s.Files = append(s.Files, id)
	}
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	p := sealPath(store, output)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("seal %s: %w", output, err)
	}
	tmp := p + ".tmp" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("seal %s: %w", output, err)
	}
	return os.Rename(tmp, p)
}

// upToDate reports whether dir holds the output of a build with input key
// key, unchanged; it returns that output's manifest. Any doubt is "no":
// the build then runs. reseal records the artifacts after a full hash.
func upToDate(dir, key string, store *cache.Store, verify, reseal bool) (*osimage.BuildManifest, bool, error) {
	final, err := filepath.Abs(dir)
	if err != nil {
		return nil, false, err
	}
	mpath := filepath.Join(final, osimage.ManifestFile)
	data, err := boundedfile.Read(mpath, maxManifestSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, nil
	}
	if _, err := parseOutputManifest(data); err != nil {
		return nil, false, nil
	}
	var m osimage.BuildManifest
	if err := json.Unmarshal(data, &m); err != nil || m.InputKey != key {
		return nil, false, nil
	}
	if !verify && sealHolds(store, final, data, m.Artifacts) {
		return &m, true, nil
	}
	for _, a := range m.Artifacts {
		p := filepath.Join(final, a.Path)
		if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() || fi.Size() != a.Size {
			return nil, false, nil
		}
		if d, err := filehash.SHA256(p); err != nil || d != a.SHA256 {
			return nil, false, nil
		}
	}
	if reseal {
		// Hashed and good: seal it so the next check is a stat.
		_ = writeSeal(store, final, data, m.Artifacts, nil)
	}
	return &m, true, nil
}

// sealHolds: the seal of output matches manifest and every artifact.
func sealHolds(store *cache.Store, output string, manifest []byte, arts []osimage.Artifact) bool {
	data, err := boundedfile.Read(sealPath(store, output), maxSealSize)
	if err != nil {
		return false
	}
	return sealMatches(data, output, manifest, arts)
}

// sealMatches: data, a seal as read from the cache directory, is output's:
// it matches manifest and every artifact as it is now.
func sealMatches(data []byte, output string, manifest []byte, arts []osimage.Artifact) bool {
	var s seal
	if json.Unmarshal(data, &s) != nil || s.Output != output || len(s.Files) != len(arts) {
		return false
	}
	if sum := sha256.Sum256(manifest); s.Manifest != hex.EncodeToString(sum[:]) {
		return false
	}
	for i, a := range arts {
		id, err := identity(filepath.Join(output, a.Path))
		if err != nil || !id.sameFile(s.Files[i]) || id.Size != a.Size || id.Path != a.Path {
			return false
		}
	}
	return true
}
