package remote_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcr "github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// BenchmarkRemoteCacheBuild builds the test recipe (pxe only, as
// TestRemoteCacheE2E) three times, each on a machine of its own: cold,
// cold with --cache-to, and with the remote cache warm and the local one
// empty. It reports the warm build as a fraction of cold (goal <= 0.1)
// and what --cache-to adds to a cold build (goal <= 5 %).
func BenchmarkRemoteCacheBuild(b *testing.B) {
	testutil.RequireTool(b, "mmdebstrap")
	testutil.RequireTool(b, "mksquashfs")
	testutil.RequireTool(b, testutil.RegistryBinary)
	e := newE2E(b)
	for range b.N {
		cold := e.build(b, newMachine(b, "cold"), false)
		pushed := e.build(b, newMachine(b, "cold-cache-to"), false, "--cache-to", e.repo)
		warm := e.build(b, newMachine(b, "warm"), false, "--cache-from", e.repo)
		b.ReportMetric(cold.took.Seconds(), "cold-s")
		b.ReportMetric(pushed.took.Seconds(), "cold-cache-to-s")
		b.ReportMetric(warm.took.Seconds(), "warm-remote-s")
		b.ReportMetric(warm.took.Seconds()/cold.took.Seconds(), "warm/cold")
		b.ReportMetric(100*(pushed.took.Seconds()-cold.took.Seconds())/cold.took.Seconds(), "cache-to-overhead-%")
	}
}

// BenchmarkRemotePull pulls the entries of the test recipe's last build in
// the shared cache (OSB_CACHE_DIR or the default) from a real registry
// into an empty store, and copies the same blobs from the same registry
// to plain files as crane does (a blob GET into a file, digest checked by
// go-containerregistry): the pull's MB/s against the plain copy's (goal
// >= 0.8).
func BenchmarkRemotePull(b *testing.B) {
	testutil.RequireTool(b, testutil.RegistryBinary)
	src, err := cache.Open(cache.DefaultDir())
	if err != nil {
		b.Fatal(err)
	}
	keys, err := src.ScopeKeys("test")
	if err != nil {
		b.Fatal(err)
	}
	reg, err := testutil.StartRegistry()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(reg.Stop)
	ctx := context.Background()
	sign, trust := keyPair(b, "bench")
	repo, err := remote.Open(reg.Host+"/osb/bench", sign, trust)
	if err != nil {
		b.Fatal(err)
	}
	var pushed []string
	for _, k := range keys {
		if _, ok := src.Lookup(k); !ok {
			continue
		}
		if _, _, err := repo.Push(ctx, src, k, "test"); err != nil {
			b.Fatal(err)
		}
		pushed = append(pushed, k)
	}
	if len(pushed) == 0 {
		b.Skip("no entries of the test recipe in the shared cache: run make test-image first")
	}
	for range b.N {
		dst, err := cache.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		var bytes int64
		for _, k := range pushed {
			_, n, err := repo.Pull(ctx, dst, k)
			if err != nil {
				b.Fatal(err)
			}
			bytes += n
		}
		pull := time.Since(began)

		plainDir := b.TempDir()
		began = time.Now()
		var plainBytes int64
		for _, k := range pushed {
			n, err := plainCopy(ctx, reg.Host+"/osb/bench:"+k, plainDir)
			if err != nil {
				b.Fatal(err)
			}
			plainBytes += n
		}
		plain := time.Since(began)
		if plainBytes != bytes {
			b.Fatalf("pulled %d bytes, copied %d", bytes, plainBytes)
		}
		mbs := func(d time.Duration) float64 { return float64(bytes) / 1e6 / d.Seconds() }
		b.ReportMetric(float64(bytes)/1e6, "MB")
		b.ReportMetric(mbs(pull), "pull-MB/s")
		b.ReportMetric(mbs(plain), "plain-MB/s")
		b.ReportMetric(plain.Seconds()/pull.Seconds(), "pull/plain")
	}
}

// plainCopy writes every layer blob of the manifest ref names into dir,
// as `crane blob` into a file would: no seal, no fsync.
func plainCopy(ctx context.Context, ref, dir string) (int64, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return 0, err
	}
	img, err := ggcr.Image(r, ggcr.WithContext(ctx))
	if err != nil {
		return 0, err
	}
	man, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, l := range man.Layers {
		layer, err := ggcr.Layer(r.Context().Digest(l.Digest.String()), ggcr.WithContext(ctx))
		if err != nil {
			return total, err
		}
		rc, err := layer.Compressed()
		if err != nil {
			return total, err
		}
		f, err := os.Create(filepath.Join(dir, l.Digest.Hex))
		if err != nil {
			rc.Close()
			return total, err
		}
		n, err := io.Copy(f, rc)
		rc.Close()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return total, fmt.Errorf("%s: %w", l.Digest, err)
		}
		total += n
	}
	return total, nil
}
