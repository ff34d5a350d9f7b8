package sources

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// OCI network timeouts. A registry that cannot be reached must fail the
// build in seconds, not after the TCP stack's minutes of retries.
var (
	ociDialTimeout   = 5 * time.Second
	ociHeaderTimeout = 20 * time.Second
	// ociPreflightTimeout bounds the whole reachability check of one source.
	ociPreflightTimeout = 6 * time.Second
)

func remoteOptions(ctx context.Context, platform v1.Platform) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(platform),
		remote.WithTransport(ociTransport()),
		remote.WithRetryBackoff(remote.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Steps: 2}),
	}
}

// ociTransport bounds connection set-up so that an unreachable registry
// fails fast; a reachable one may take as long as its blobs need.
func ociTransport() http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: ociDialTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = ociDialTimeout
	t.ResponseHeaderTimeout = ociHeaderTimeout
	return t
}

// MirrorsEnv names the environment variable holding registry mirrors.
const MirrorsEnv = "OSB_REGISTRY_MIRRORS"

// RegistryMirrors maps a registry host (ghcr.io) to the mirror serving its
// repositories: a host[:port] with an optional path prefix; an http://
// prefix marks a plain-HTTP mirror (localhost and 127.0.0.1 are plain HTTP
// anyway).
type RegistryMirrors map[string]string

// ParseRegistryMirrors reads "ghcr.io=127.0.0.1:5000,docker.io=mirror/hub".
func ParseRegistryMirrors(s string) (RegistryMirrors, error) {
	m := RegistryMirrors{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		from, to, ok := strings.Cut(pair, "=")
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		if !ok || from == "" || to == "" || strings.ContainsAny(from, "/=") {
			return nil, fmt.Errorf("%s: %q: want REGISTRY=MIRROR-HOST[/PREFIX]", MirrorsEnv, pair)
		}
		if strings.HasPrefix(to, "https://") {
			to = strings.TrimPrefix(to, "https://")
		}
		if _, err := name.NewRegistry(strings.SplitN(strings.TrimPrefix(to, "http://"), "/", 2)[0]); err != nil {
			return nil, fmt.Errorf("%s: %q: mirror: %w", MirrorsEnv, pair, err)
		}
		m[from] = strings.TrimSuffix(to, "/")
	}
	return m, nil
}

// RegistryMirrorsFromEnv parses $OSB_REGISTRY_MIRRORS.
func RegistryMirrorsFromEnv() (RegistryMirrors, error) {
	return ParseRegistryMirrors(os.Getenv(MirrorsEnv))
}

// Rewrite returns the reference to pull: ref itself, or the same
// repository and digest on the registry's mirror (then via names it).
func (m RegistryMirrors) Rewrite(ref name.Digest) (name.Digest, string, error) {
	r, via, err := m.RewriteRef(ref)
	if err != nil {
		return ref, "", err
	}
	return r.(name.Digest), via, nil
}

// RewriteRef is Rewrite for a tag or a digest: the same repository and
// tag or digest on the registry's mirror.
func (m RegistryMirrors) RewriteRef(ref name.Reference) (name.Reference, string, error) {
	to, ok := m[ref.Context().RegistryStr()]
	if !ok {
		return ref, "", nil
	}
	var opts []name.Option
	if strings.HasPrefix(to, "http://") {
		to = strings.TrimPrefix(to, "http://")
		opts = append(opts, name.Insecure)
	}
	repo := to + "/" + ref.Context().RepositoryStr()
	var r name.Reference
	var err error
	if d, isDigest := ref.(name.Digest); isDigest {
		r, err = name.NewDigest(repo+"@"+d.DigestStr(), opts...)
	} else {
		r, err = name.NewTag(repo+":"+ref.Identifier(), opts...)
	}
	if err != nil {
		return ref, "", fmt.Errorf("mirror %s for %s: %w", to, ref.Context().RegistryStr(), err)
	}
	return r, to, nil
}
