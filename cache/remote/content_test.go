package remote_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/cache"
	cacheremote "github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// rawFile is one file of an entry pushed as a registry writer made it,
// not as Push would: what a pull must not trust.
type rawFile struct {
	path string
	mode fs.FileMode
	data string // regular files
	link string // symlinks
}

// pushRaw pushes an entry of the files given to repo (REGISTRY/PATH) the
// way anyone with push rights could, and returns its key.
func pushRaw(t *testing.T, repo, step string, files []rawFile) string {
	t.Helper()
	var in cache.Inputs
	in.Add("raw", step)
	m := cache.Meta{Step: step, Key: in.Key(), Inputs: in, Format: 2}
	ref, err := name.NewRepository(repo)
	if err != nil {
		t.Fatal(err)
	}
	var layers []v1.Descriptor
	mt := time.Unix(1700000000, 0).UnixNano()
	for _, f := range files {
		cf := cache.File{Path: f.path, Mode: f.mode, Link: f.link}
		if f.mode.IsRegular() {
			sum := sha256.Sum256([]byte(f.data))
			cf.Size, cf.MTime, cf.SHA256 = int64(len(f.data)), mt, hex.EncodeToString(sum[:])
			l := static.NewLayer([]byte(f.data), cacheremote.FileType)
			if err := remote.WriteLayer(ref, l); err != nil {
				t.Fatal(err)
			}
			layers = append(layers, v1.Descriptor{
				MediaType: cacheremote.FileType, Size: cf.Size,
				Digest:      v1.Hash{Algorithm: "sha256", Hex: cf.SHA256},
				Annotations: map[string]string{"org.opencontainers.image.title": f.path},
			})
		}
		m.Files = append(m.Files, cf)
	}
	seal, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	sl := static.NewLayer(seal, cacheremote.SealType)
	if err := remote.WriteLayer(ref, sl); err != nil {
		t.Fatal(err)
	}
	sd, _ := sl.Digest()
	man := v1.Manifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: cacheremote.ArtifactType,
		Config: v1.Descriptor{MediaType: cacheremote.SealType, Digest: sd, Size: int64(len(seal))},
		Layers: layers,
		Annotations: map[string]string{
			"dev.ironcore.os-builder.cache.step": step,
			"org.opencontainers.image.created":   time.Now().UTC().Format(time.RFC3339),
		},
	}
	raw, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Put(ref.Tag(m.Key), rawManifest(raw)); err != nil {
		t.Fatal(err)
	}
	return m.Key
}

type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// TestPullRefusesUnsafeEntries: an entry whose symlinks leave it, or whose
// files or directories carry setuid, setgid or sticky bits or are
// world-writable, is refused on pull and the store gets nothing. A plain
// entry pushed the same way is pulled (the helper makes valid entries).
func TestPullRefusesUnsafeEntries(t *testing.T) {
	reg := testutil.NewRegistry(t)
	ctx := context.Background()
	secret := filepath.Join(t.TempDir(), "db.key")
	if err := os.WriteFile(secret, []byte("SECRET KEY"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := func(p string, mode fs.FileMode) rawFile { return rawFile{path: p, mode: mode, data: "data of " + p} }
	dir := func(p string, mode fs.FileMode) rawFile { return rawFile{path: p, mode: fs.ModeDir | mode} }
	link := func(p, to string) rawFile { return rawFile{path: p, mode: fs.ModeSymlink | 0o777, link: to} }
	for _, tc := range []struct {
		name  string
		files []rawFile
		want  string // in the error; "" for a good entry
	}{
		{"plain", []rawFile{dir("sub", 0o755), file("sub/a", 0o644), link("l", "sub/a")}, ""},
		{"absolute link", []rawFile{file("a", 0o644), link("vmlinuz", secret)}, "vmlinuz"},
		{"climbing link", []rawFile{dir("sub", 0o755), link("sub/vmlinuz", "../../db.key")}, "sub/vmlinuz"},
		{"setuid file", []rawFile{file("su", 0o755|fs.ModeSetuid)}, "su"},
		{"setgid file", []rawFile{file("sg", 0o755|fs.ModeSetgid)}, "sg"},
		{"setgid directory", []rawFile{dir("d", 0o755|fs.ModeSetgid), file("d/a", 0o644)}, "d"},
		{"sticky directory", []rawFile{dir("tmp", 0o755|fs.ModeSticky)}, "tmp"},
		{"world-writable directory", []rawFile{dir("w", 0o777), file("w/a", 0o644)}, "w"},
		{"world-writable file", []rawFile{file("w", 0o666)}, "w"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := reg + "/osb/" + strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "_", "-")
			key := pushRaw(t, repo, tc.name, tc.files)
			s := openStore(t)
			dir, _, err := openUnsigned(t, repo).Pull(ctx, s, key)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("pull: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("pulled the entry into %s", dir)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("pull: %v, want an error naming %s", err, tc.want)
			}
			if _, ok := s.Lookup(key); ok {
				t.Errorf("the refused entry is in the store")
			}
		})
	}
}

// TestPullBounds: an entry with more files or more bytes than the limits
// ($OSB_CACHE_MAX_ENTRY_FILES, $OSB_CACHE_MAX_ENTRY_BYTES) is refused
// before any of its files is downloaded: their blobs are gone from the
// registry, and the error is the limit's, not a missing blob's.
func TestPullBounds(t *testing.T) {
	testutil.RequireTool(t, testutil.RegistryBinary)
	reg, err := testutil.StartRegistry()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	ctx := context.Background()
	files := []rawFile{{path: "a", mode: 0o644, data: strings.Repeat("a", 600)}, {path: "b", mode: 0o644, data: strings.Repeat("b", 600)}, {path: "c", mode: 0o644, data: "c"}}
	key := pushRaw(t, reg.Host+"/osb/cache", "bounds", files)
	for _, f := range files {
		sum := sha256.Sum256([]byte(f.data))
		h := hex.EncodeToString(sum[:])
		if err := os.RemoveAll(filepath.Join(reg.Storage(), "docker/registry/v2/blobs/sha256", h[:2], h)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		env, value, want string
	}{
		{"OSB_CACHE_MAX_ENTRY_FILES", "2", "3 files, more than the 2 allowed ($OSB_CACHE_MAX_ENTRY_FILES)"},
		{"OSB_CACHE_MAX_ENTRY_BYTES", "1000", "1201 bytes, more than the 1000 allowed ($OSB_CACHE_MAX_ENTRY_BYTES)"},
		{"OSB_CACHE_MAX_ENTRY_BYTES", "lots", "$OSB_CACHE_MAX_ENTRY_BYTES"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			s := openStore(t)
			_, n, err := openUnsigned(t, reg.Host+"/osb/cache").Pull(ctx, s, key)
			if err == nil || !strings.Contains(err.Error(), tc.want) || n != 0 {
				t.Errorf("pull: %d bytes, %v; want nothing and an error saying %q", n, err, tc.want)
			}
		})
	}
}

// openUnsigned opens ref taking unsigned entries, as --cache-trust-unsigned
// does: the entries above are pushed unsigned, as an attacker with push
// access would, and the content checks must hold even where a user chose
// to take them (a trusted signer's entries pass the same checks).
func openUnsigned(t *testing.T, ref string) *cacheremote.Repo {
	t.Helper()
	r, err := cacheremote.Open(ref, cacheremote.TrustUnsigned())
	if err != nil {
		t.Fatal(err)
	}
	return r
}
