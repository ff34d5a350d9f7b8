package remote_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	ggcr "github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/uki"
)

// keyPair is a key and certificate made as `builder genkey` makes them:
// the option that signs with the key and the one that trusts it.
func keyPair(t testing.TB, cn string) (sign, trust remote.Option) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "keys")
	if err := uki.GenerateKey(dir, cn); err != nil {
		t.Fatal(err)
	}
	key, cert, err := uki.LoadSigner(filepath.Join(dir, uki.KeyFile), filepath.Join(dir, uki.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	return remote.SignWith(key, cert), remote.Trust(cert)
}

// tamper replaces the content of the entry's file path by evil in the
// registry, seal and manifest made to agree, the manifest's annotations
// (the signature among them) kept: what someone who can push to the
// repository but does not hold the key can do.
func tamper(t *testing.T, reg, key, path, evil string) {
	t.Helper()
	repo, err := name.NewRepository(reg+"/osb/cache", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	tag := repo.Tag(key)
	d, err := ggcr.Get(tag)
	if err != nil {
		t.Fatal(err)
	}
	var man v1.Manifest
	if err := json.Unmarshal(d.Manifest, &man); err != nil {
		t.Fatal(err)
	}
	l, err := ggcr.Layer(repo.Digest(man.Config.Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	seal, err := cache.ParseSeal(raw)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(evil))
	layer := 0
	for i, f := range seal.Files {
		if f.Kind() != "file" {
			continue
		}
		if f.Path == path {
			seal.Files[i].SHA256, seal.Files[i].Size = hex.EncodeToString(sum[:]), int64(len(evil))
			man.Layers[layer].Digest = v1.Hash{Algorithm: "sha256", Hex: seal.Files[i].SHA256}
			man.Layers[layer].Size = int64(len(evil))
		}
		layer++
	}
	sealRaw, err := json.Marshal(seal)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		data []byte
		mt   types.MediaType
	}{{[]byte(evil), remote.FileType}, {sealRaw, remote.SealType}} {
		if err := ggcr.WriteLayer(repo, static.NewLayer(b.data, b.mt)); err != nil {
			t.Fatal(err)
		}
	}
	h, n, err := v1.SHA256(bytes.NewReader(sealRaw))
	if err != nil {
		t.Fatal(err)
	}
	man.Config.Digest, man.Config.Size = h, n
	out, err := json.Marshal(man)
	if err != nil {
		t.Fatal(err)
	}
	if err := ggcr.Put(tag, rawManifest(out)); err != nil {
		t.Fatal(err)
	}
}

// TestSignedEntries: a puller takes an entry only when a key it trusts
// signed this key and this seal; unsigned entries, entries signed by
// another key and entries changed after signing are ErrUntrusted (misses,
// nothing added to the store); TrustUnsigned takes them all; a signing
// pusher pushes over an entry it did not sign.
func TestSignedEntries(t *testing.T) {
	reg := testutil.NewRegistry(t)
	ctx := context.Background()
	ref := reg + "/osb/cache"
	release, trustRelease := keyPair(t, "release")
	dev, trustDev := keyPair(t, "dev")
	src := openStore(t)
	signedKey := fill(t, src, "signed", map[string]string{"a": "alpha", "sub/b": "beta"})
	unsignedKey := fill(t, src, "unsigned", map[string]string{"a": "gamma"})
	devKey := fill(t, src, "dev", map[string]string{"a": "delta"})
	tamperedKey := fill(t, src, "tampered", map[string]string{"a": "epsilon", "b": "zeta"})
	push := func(key string, opts ...remote.Option) {
		t.Helper()
		r, err := remote.Open(ref, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, pushed, err := r.Push(ctx, src, key, "test"); err != nil || !pushed {
			t.Fatalf("push %.12s: pushed %v, %v", key, pushed, err)
		}
	}
	push(signedKey, release)
	push(unsignedKey)
	push(devKey, dev)
	push(tamperedKey, release)
	tamper(t, reg, tamperedKey, "a", "evil")

	pull := func(key string, opts ...remote.Option) (*cache.Store, error) {
		t.Helper()
		r, err := remote.Open(ref, opts...)
		if err != nil {
			t.Fatal(err)
		}
		s := openStore(t)
		_, _, err = r.Pull(ctx, s, key)
		return s, err
	}
	for _, tc := range []struct {
		name string
		key  string
		opts []remote.Option
		ok   bool
	}{
		{"signed, trusted", signedKey, []remote.Option{trustRelease}, true},
		{"signed, one of two trusted", signedKey, []remote.Option{trustDev, trustRelease}, true},
		{"signed, trusting nobody", signedKey, nil, false},
		{"unsigned", unsignedKey, []remote.Option{trustRelease}, false},
		{"another key", devKey, []remote.Option{trustRelease}, false},
		{"changed after signing", tamperedKey, []remote.Option{trustRelease}, false},
		{"unsigned, trusting unsigned", unsignedKey, []remote.Option{remote.TrustUnsigned()}, true},
		{"another key, trusting unsigned", devKey, []remote.Option{remote.TrustUnsigned()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := pull(tc.key, tc.opts...)
			if tc.ok {
				if err != nil {
					t.Fatalf("pull: %v", err)
				}
				if err := s.Verify(tc.key); err != nil {
					t.Errorf("pulled entry: %v", err)
				}
				return
			}
			if !errors.Is(err, remote.ErrUntrusted) {
				t.Fatalf("pull: %v, want ErrUntrusted", err)
			}
			t.Logf("refused: %v", err)
			if _, ok := s.Lookup(tc.key); ok {
				t.Errorf("a refused entry is in the store")
			}
		})
	}

	// The release builder pushes over the unsigned and the tampered entry.
	for _, key := range []string{unsignedKey, tamperedKey} {
		push(key, release)
		if _, err := pull(key, trustRelease); err != nil {
			t.Errorf("after the release push: %v", err)
		}
	}
	r, _ := remote.Open(ref, release)
	if _, pushed, err := r.Push(ctx, src, signedKey, "test"); err != nil || pushed {
		t.Errorf("pushing a signed entry again: pushed %v, %v; want nothing", pushed, err)
	}
}
