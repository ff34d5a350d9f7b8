package remote

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/httpsonly"
	"github.com/ironcore-dev/os-builder/internal/ocirace"
)

// Repo is one repository of cache entries.
type Repo struct {
	repo   name.Repository
	puller *remote.Puller
	pusher *remote.Pusher
	opts   []remote.Option
	cfg    config
}

// ErrNotFound is a key the repository has no entry for.
var ErrNotFound = errors.New("no such entry in the remote cache")

// Open names the repository REF (registry/path, no tag or digest).
// Credentials come from go-containerregistry's default keychain (the
// Docker config and its credential helpers, as crane reads them);
// loopback registries are spoken to over plain HTTP, others only with
// Insecure. Pushed entries are signed and pulled ones checked as the
// options say (sign.go).
func Open(ref string, options ...Option) (*Repo, error) {
	var cfg config
	for _, o := range options {
		o(&cfg)
	}
	var nameOpts []name.Option
	if cfg.insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	repo, err := name.NewRepository(ref, nameOpts...)
	if err != nil {
		return nil, fmt.Errorf("cache repository %q: %w (want REGISTRY/PATH, no tag)", ref, err)
	}
	// A registry that stops answering must turn into misses quickly, not
	// hold every step for minutes: short dials and header waits, one retry.
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		MaxIdleConnsPerHost:   8,
		ForceAttemptHTTP2:     true,
	}
	var rt http.RoundTripper = tr
	if !cfg.insecure {
		rt = httpsonly.Transport(tr)
	}
	opts := []remote.Option{
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(rt),
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 2}),
		remote.WithUserAgent("os-builder remote-cache"),
	}
	r := &Repo{repo: repo, opts: opts, cfg: cfg}
	if r.puller, err = remote.NewPuller(opts...); err != nil {
		return nil, err
	}
	if r.pusher, err = remote.NewPusher(opts...); err != nil {
		return nil, err
	}
	return r, nil
}

// String is the repository's name.
func (r *Repo) String() string { return r.repo.String() }

func (r *Repo) tag(key string) (name.Tag, error) {
	if err := cache.ValidKey(key); err != nil {
		return name.Tag{}, err
	}
	return r.repo.Tag(key), nil
}

// isNotFound reports a registry's "no such manifest/blob/repository".
func isNotFound(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode == http.StatusNotFound
	}
	return false
}

// Has reports whether the repository holds an entry for key.
func (r *Repo) Has(ctx context.Context, key string) (bool, error) {
	t, err := r.tag(key)
	if err != nil {
		return false, err
	}
	_, err = r.puller.Head(ctx, t)
	switch {
	case err == nil:
		return true, nil
	case isNotFound(err):
		return false, nil
	}
	return false, err
}

// entry is a fetched, checked manifest and seal.
type entry struct {
	manifest *v1.Manifest
	seal     *cache.Meta
	files    []cache.File // regular files, in layer order
}

// fetch reads and checks the manifest and seal tagged key.
func (r *Repo) fetch(ctx context.Context, key string) (*entry, error) {
	t, err := r.tag(key)
	if err != nil {
		return nil, err
	}
	d, err := r.puller.Get(ctx, t)
	if isNotFound(err) {
		return nil, fmt.Errorf("%s: %w", t, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if len(d.Manifest) > maxManifestSize {
		return nil, fmt.Errorf("%s: manifest of %d bytes, more than %d", t, len(d.Manifest), maxManifestSize)
	}
	var man v1.Manifest
	if err := json.Unmarshal(d.Manifest, &man); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", t, err)
	}
	if man.MediaType != types.OCIManifestSchema1 || man.ArtifactType != ArtifactType || man.Config.MediaType != SealType {
		return nil, fmt.Errorf("%s: not an os-builder cache entry (media type %q, artifact type %q, config %q)", t, man.MediaType, man.ArtifactType, man.Config.MediaType)
	}
	if err := r.cfg.verify(&man, key); err != nil {
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	if man.Config.Size < 0 || man.Config.Size > maxSealSize {
		return nil, fmt.Errorf("%s: seal of %d bytes, more than %d", t, man.Config.Size, maxSealSize)
	}
	raw, err := r.blob(ctx, man.Config)
	if err != nil {
		return nil, fmt.Errorf("%s: seal: %w", t, err)
	}
	seal, err := cache.ParseSeal(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: seal: %w", t, err)
	}
	files, err := checkManifest(&man, seal, key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	return &entry{manifest: &man, seal: seal, files: files}, nil
}

// blob reads a small blob whole, checked against its descriptor.
func (r *Repo) blob(ctx context.Context, d v1.Descriptor) ([]byte, error) {
	var buf bytes.Buffer
	if err := r.copyBlob(ctx, d, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// copyBlob copies the blob d names to w: exactly d.Size bytes whose
// sha256 is d's digest, else an error (w has then seen bad bytes).
func (r *Repo) copyBlob(ctx context.Context, d v1.Descriptor, w io.Writer) error {
	if d.Digest.Algorithm != "sha256" {
		return fmt.Errorf("blob %s: not a sha256 digest", d.Digest)
	}
	l, err := r.puller.Layer(ctx, r.repo.Digest(d.Digest.String()))
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(rc, d.Size+1))
	if err != nil && n <= d.Size {
		return fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	if n != d.Size {
		return fmt.Errorf("blob %s: %d bytes or more, want %d", d.Digest, n, d.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d.Digest.Hex {
		return fmt.Errorf("blob %s: its bytes hash to sha256:%s", d.Digest, got)
	}
	return nil
}

// Pull fetches the entry for key into store and returns its directory and
// the bytes it downloaded. ErrNotFound: no entry; any other error: the
// entry is unusable (not the layout, a blob that does not match its
// digest, the registry gone) and nothing was added to the store.
func (r *Repo) Pull(ctx context.Context, store *cache.Store, key string) (string, int64, error) {
	e, err := r.fetch(ctx, key)
	if err != nil {
		return "", 0, err
	}
	var n int64
	dir, err := store.Import(ctx, e.seal, func(dir string) error {
		var err error
		n, err = r.write(ctx, dir, e)
		return err
	})
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", r.repo.Tag(key), err)
	}
	return dir, n, nil
}

// write makes the entry's tree in dir: directories first (as real
// directories, so no file is written through a symlink), then each file
// from its blob, then symlinks; modes and file mtimes as sealed.
func (r *Repo) write(ctx context.Context, dir string, e *entry) (int64, error) {
	seal := append([]cache.File(nil), e.seal.Files...)
	sort.Slice(seal, func(i, j int) bool { return seal[i].Path < seal[j].Path })
	dirs := map[string]bool{".": true}
	parentOK := func(f cache.File) error {
		if p := filepath.Dir(filepath.FromSlash(f.Path)); !dirs[filepath.ToSlash(p)] {
			return fmt.Errorf("seal: %s: its directory %s is not a directory of the seal", f.Path, p)
		}
		return nil
	}
	for _, f := range seal {
		if f.Kind() != "dir" {
			continue
		}
		if err := parentOK(f); err != nil {
			return 0, err
		}
		if err := os.Mkdir(cache.SealPath(dir, f), 0o755); err != nil {
			return 0, err
		}
		dirs[f.Path] = true
	}
	var total int64
	for i, f := range e.files {
		if err := parentOK(f); err != nil {
			return total, err
		}
		p := cache.SealPath(dir, f)
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return total, err
		}
		err = r.copyBlob(ctx, e.manifest.Layers[i], &writeBehind{f: out})
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return total, fmt.Errorf("%s: %w", f.Path, err)
		}
		total += f.Size
		if err := os.Chmod(p, f.Mode.Perm()|f.Mode&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
			return total, err
		}
		mt := time.Unix(0, f.MTime)
		if err := os.Chtimes(p, mt, mt); err != nil {
			return total, err
		}
	}
	for _, f := range seal {
		if f.Kind() != "symlink" {
			continue
		}
		if err := parentOK(f); err != nil {
			return total, err
		}
		if err := os.Symlink(f.Link, cache.SealPath(dir, f)); err != nil {
			return total, err
		}
	}
	// Directory modes last: a read-only directory would refuse its files.
	for i := len(seal) - 1; i >= 0; i-- {
		if f := seal[i]; f.Kind() == "dir" {
			if err := os.Chmod(cache.SealPath(dir, f), f.Mode.Perm()|f.Mode&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// Push uploads the local entry for key unless the repository has it
// (signed by this Repo's key, when it has one: see upToDate). It
// returns the bytes uploaded (blobs the registry had are not counted) and
// whether it pushed. recipe is recorded on the manifest (for pull
// --recipe). Two builders pushing one key at once both succeed: blobs are
// content-addressed and the tag ends on one manifest.
func (r *Repo) Push(ctx context.Context, store *cache.Store, key, recipe string) (int64, bool, error) {
	t, err := r.tag(key)
	if err != nil {
		return 0, false, err
	}
	dir, m, err := store.Sealed(key)
	if err != nil {
		return 0, false, err
	}
	seal, err := sealBytes(m)
	if err != nil {
		return 0, false, err
	}
	man, err := entryManifest(m, seal, recipe, time.Now())
	if err != nil {
		return 0, false, err
	}
	sig, err := r.cfg.signature(key, man.Config.Digest)
	if err != nil {
		return 0, false, err
	}
	if ok, err := r.upToDate(ctx, key, man.Config.Digest, sig); err != nil || ok {
		return 0, false, err
	}
	if sig != "" {
		man.Annotations[annotationSignature] = sig
	}
	var sent int64
	upload := func(l *blobLayer) error {
		l.sent = &sent
		if err := r.pusher.Upload(ctx, r.repo, l); err != nil {
			return fmt.Errorf("upload %s: %w", l.digest, err)
		}
		return nil
	}
	if err := upload(&blobLayer{mediaType: SealType, digest: man.Config.Digest, size: man.Config.Size, open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(seal)), nil
	}}); err != nil {
		return sent, false, err
	}
	i := 0
	for _, f := range m.Files {
		if f.Kind() != "file" {
			continue
		}
		p := cache.SealPath(dir, f)
		if err := upload(&blobLayer{mediaType: FileType, digest: man.Layers[i].Digest, size: f.Size, open: func() (io.ReadCloser, error) {
			return os.Open(p)
		}}); err != nil {
			return sent, false, fmt.Errorf("%s: %w", f.Path, err)
		}
		i++
	}
	raw, err := json.Marshal(man)
	if err != nil {
		return sent, false, err
	}
	err = r.pusher.Push(ctx, t, rawManifest(raw))
	// Another builder committing a blob this manifest names makes
	// docker-registry refuse it for a moment (TestConcurrentPush).
	for try := 0; try < 2 && ocirace.SharedBlob(err); try++ {
		select {
		case <-ctx.Done():
			return sent, false, ctx.Err()
		case <-time.After(time.Second):
		}
		err = r.pusher.Push(ctx, t, rawManifest(raw))
	}
	if err != nil {
		return sent, false, fmt.Errorf("%s: %w", t, err)
	}
	return sent + int64(len(raw)), true, nil
}

// Keys lists the keys the repository has entries for (tags that are not
// plain keys are not the cache's and are left out).
func (r *Repo) Keys(ctx context.Context) ([]string, error) {
	tags, err := r.puller.List(ctx, r.repo)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", r.repo, err)
	}
	var keys []string
	for _, t := range tags {
		if cache.ValidKey(t) == nil {
			keys = append(keys, t)
		}
	}
	sort.Strings(keys)
	return keys, nil
}

// Info is what a remote entry's manifest says about it.
type Info struct {
	Key    string    `json:"key"`
	Step   string    `json:"step"`
	Recipe string    `json:"recipe,omitempty"`
	Pushed time.Time `json:"pushed"`
	Digest string    `json:"digest"`
}

// Stat reads the manifest tagged key (not the blobs).
func (r *Repo) Stat(ctx context.Context, key string) (Info, error) {
	t, err := r.tag(key)
	if err != nil {
		return Info{}, err
	}
	d, err := r.puller.Get(ctx, t)
	if err != nil {
		return Info{}, fmt.Errorf("%s: %w", t, err)
	}
	if len(d.Manifest) > maxManifestSize {
		return Info{}, fmt.Errorf("%s: manifest of %d bytes, more than %d", t, len(d.Manifest), maxManifestSize)
	}
	var man v1.Manifest
	if err := json.Unmarshal(d.Manifest, &man); err != nil {
		return Info{}, fmt.Errorf("%s: manifest: %w", t, err)
	}
	if man.ArtifactType != ArtifactType {
		return Info{}, fmt.Errorf("%s: not an os-builder cache entry (artifact type %q)", t, man.ArtifactType)
	}
	pushed, err := time.Parse(time.RFC3339, man.Annotations[annotationCreated])
	if err != nil {
		return Info{}, fmt.Errorf("%s: annotation %s: %w", t, annotationCreated, err)
	}
	return Info{Key: key, Step: man.Annotations[annotationStep], Recipe: man.Annotations[annotationRecipe], Pushed: pushed, Digest: d.Digest.String()}, nil
}

// ErrDeleteRefused is a registry that does not delete manifests
// (docker-registry without REGISTRY_STORAGE_DELETE_ENABLED=true answers
// 405 Method Not Allowed).
var ErrDeleteRefused = errors.New("the registry refuses deletes (docker-registry: set REGISTRY_STORAGE_DELETE_ENABLED=true)")

// Delete removes the entry for key: its manifest, by digest (a tag
// delete is not in every registry), which takes the tag with it.
func (r *Repo) Delete(ctx context.Context, info Info) error {
	if _, err := r.tag(info.Key); err != nil {
		return err
	}
	d := r.repo.Digest(info.Digest)
	err := r.pusher.Delete(ctx, d)
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusMethodNotAllowed || te.StatusCode == http.StatusUnsupportedMediaType) {
		return fmt.Errorf("delete %s: %w", d, ErrDeleteRefused)
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", d, err)
	}
	return nil
}

// rawManifest pushes a manifest as it is.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// blobLayer is a blob to upload whose digest and size are known (from the
// seal): read from a file or memory as it is. sent counts the bytes the
// upload read (none when the registry had the blob).
type blobLayer struct {
	mediaType types.MediaType
	digest    v1.Hash
	size      int64
	open      func() (io.ReadCloser, error)
	sent      *int64
}

func (l *blobLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *blobLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *blobLayer) Compressed() (io.ReadCloser, error)   { return l.counted() }
func (l *blobLayer) Uncompressed() (io.ReadCloser, error) { return l.counted() }
func (l *blobLayer) Size() (int64, error)                 { return l.size, nil }
func (l *blobLayer) MediaType() (types.MediaType, error)  { return l.mediaType, nil }

func (l *blobLayer) counted() (io.ReadCloser, error) {
	rc, err := l.open()
	if err != nil || l.sent == nil {
		return rc, err
	}
	return countingReader{rc, l.sent}, nil
}

type countingReader struct {
	io.ReadCloser
	n *int64
}

func (c countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	*c.n += int64(n)
	return n, err
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }

// writeBehind writes to a file and starts the kernel's writeback of each
// chunk written (sync_file_range, not waiting): the fsync the seal makes
// at the end then finds the bytes on their way to disk instead of
// writing the whole file after the download.
type writeBehind struct {
	f       *os.File
	off     int64
	flushed int64
}

const writeBehindChunk = 8 << 20

func (w *writeBehind) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if w.off-w.flushed >= writeBehindChunk {
		// Advice only: an error here leaves the work to the fsync.
		_ = unix.SyncFileRange(int(w.f.Fd()), w.flushed, w.off-w.flushed, unix.SYNC_FILE_RANGE_WRITE)
		w.flushed = w.off
	}
	return n, err
}
