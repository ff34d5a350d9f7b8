package remotecache

import (
	"errors"

	"github.com/ironcore-dev/os-builder/cache/remote"
	"github.com/ironcore-dev/os-builder/uki"
)

// Access is how a build or `builder cache` speaks to a cache repository:
// plain HTTP or not, the key pushed entries are signed with, the
// certificates pulled entries must be signed by (docs/build-graph.md,
// "Trusting a cache").
type Access struct {
	// Insecure allows plain HTTP to a registry not on loopback.
	Insecure bool
	// SignKey and SignCert (PEM, as `builder genkey` writes them) sign
	// pushed entries; pushing needs them.
	SignKey, SignCert string
	// Trust are certificates (PEM or DER) whose keys' entries are taken.
	Trust []string
	// TrustUnsigned takes every entry, signed or not.
	TrustUnsigned bool
}

// ErrNoSignKey is a push without a signing key.
var ErrNoSignKey = errors.New("cache entries are pushed signed: give --cache-sign-key and --cache-sign-cert (`builder genkey DIR` makes a pair)")

// ErrNoTrust is a pull that would take nothing.
var ErrNoTrust = errors.New("cache entries are taken only when signed by a trusted key: give --cache-trust CERT (the pushers' certificate, repeatable or $OSB_CACHE_TRUST), or --cache-trust-unsigned to take any entry")

// PushOptions are the options of a repository pushed to.
func (a Access) PushOptions() ([]remote.Option, error) {
	if a.SignKey == "" || a.SignCert == "" {
		return nil, ErrNoSignKey
	}
	key, cert, err := uki.LoadSigner(a.SignKey, a.SignCert)
	if err != nil {
		return nil, err
	}
	return append(a.NetOptions(), remote.SignWith(key, cert)), nil
}

// PullOptions are the options of a repository pulled from.
func (a Access) PullOptions() ([]remote.Option, error) {
	opts := a.NetOptions()
	if a.TrustUnsigned {
		opts = append(opts, remote.TrustUnsigned())
	}
	for _, p := range a.Trust {
		cert, err := uki.LoadCertificate(p)
		if err != nil {
			return nil, err
		}
		opts = append(opts, remote.Trust(cert))
	}
	if len(a.Trust) == 0 && !a.TrustUnsigned {
		return nil, ErrNoTrust
	}
	return opts, nil
}

// NetOptions are the options of a repository only listed or pruned.
func (a Access) NetOptions() []remote.Option {
	if a.Insecure {
		return []remote.Option{remote.Insecure()}
	}
	return nil
}
