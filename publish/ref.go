// Package publish pushes builder output directories to OCI registries or
// local OCI layout directories as one image index (one manifest per
// architecture, see docs/image-format.md), and reads them back: Pull fetches
// and verifies the artifacts, Inspect describes an image's boot identity.
package publish

import (
	"context"
	"crypto"
	"crypto/x509"
	"fmt"
	"net/http"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ironcore-dev/os-builder/internal/httpsonly"
)

// DefaultLayout is where Push writes when no reference is given.
const DefaultLayout = "out/oci"

// LayoutPrefix marks a reference to a local OCI layout: oci:PATH[:TAG].
const LayoutPrefix = "oci:"

// annotationRefName tags a manifest inside an OCI layout's index.json.
const annotationRefName = "org.opencontainers.image.ref.name"

// Options tune registry access. The zero value uses the default keychain
// (docker config, credential helpers) and HTTPS except for loopback hosts.
type Options struct {
	// Insecure allows plain HTTP to the registry.
	Insecure bool
	// Keychain supplies credentials; nil means authn.DefaultKeychain.
	// Credentials are never logged or put into errors by this package.
	Keychain authn.Keychain
	// Transport, if set, replaces the default HTTP transport.
	Transport http.RoundTripper
	// Tags are extra tags Push puts on the same index (the reference's own
	// tag is always set).
	Tags []string
	// Arch selects the platform for Pull; empty means the only one.
	Arch string
	// Kind selects the manifest Pull takes of the platform: "v1", or an
	// IronCore Image V2 kind (UKI, EFI, Disk); empty means the v1
	// manifest where there is one, else every V2 kind.
	Kind string
	// NoV2 makes Push publish the v1 manifests alone (builder push --no-v2).
	NoV2 bool
	// Provenance is recorded in the provenance Push attaches to a
	// registry push.
	Provenance Provenance
	// Signer and SignCert sign the SBOM and provenance Push attaches (DSSE
	// envelopes, see dsse.go); nil: they are attached unsigned.
	Signer   crypto.Signer
	SignCert *x509.Certificate
	// VerifyCert is a certificate Verify requires the attestations to be
	// signed with, besides the one the output's UKIs are signed with.
	VerifyCert *x509.Certificate
}

func (o Options) remoteOptions(ctx context.Context) []remote.Option {
	kc := o.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(o.transport())}
}

// transport is o.Transport (default: go-containerregistry's), refusing
// plain HTTP to a registry not on loopback unless o.Insecure: the library
// would otherwise fall back to it for private ranges by itself.
func (o Options) transport() http.RoundTripper {
	rt := o.Transport
	if rt == nil {
		rt = remote.DefaultTransport
	}
	if o.Insecure {
		return rt
	}
	return httpsonly.Transport(rt)
}

func (o Options) nameOptions() []name.Option {
	if o.Insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}

// validTag is the OCI distribution spec's tag grammar.
var validTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// Target is a parsed reference: either a registry reference or a local OCI
// layout path with an optional tag.
type Target struct {
	// Remote is set for registry references.
	Remote name.Reference
	// LayoutPath and LayoutTag are set for oci:PATH[:TAG].
	LayoutPath string
	LayoutTag  string
}

// String renders the target the way ParseTarget accepts it.
func (t Target) String() string {
	if t.Remote != nil {
		return t.Remote.String()
	}
	if t.LayoutTag == "" {
		return LayoutPrefix + t.LayoutPath
	}
	return LayoutPrefix + t.LayoutPath + ":" + t.LayoutTag
}

// ParseTarget parses "oci:PATH[:TAG]" (a local OCI layout; a colon after the
// last slash starts the tag) or a registry reference (REGISTRY/REPO:TAG or
// REGISTRY/REPO@sha256:...).
func ParseTarget(ref string, opts Options) (Target, error) {
	if rest, ok := strings.CutPrefix(ref, LayoutPrefix); ok {
		if rest == "" {
			return Target{}, fmt.Errorf("reference %q: empty layout path", ref)
		}
		path, tag := rest, ""
		if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
			path, tag = rest[:i], rest[i+1:]
			if path == "" {
				return Target{}, fmt.Errorf("reference %q: empty layout path", ref)
			}
			if !validTag.MatchString(tag) {
				return Target{}, fmt.Errorf("reference %q: invalid tag %q", ref, tag)
			}
		}
		return Target{LayoutPath: path, LayoutTag: tag}, nil
	}
	r, err := name.ParseReference(ref, opts.nameOptions()...)
	if err != nil {
		return Target{}, fmt.Errorf("parse reference %q: %w", ref, err)
	}
	return Target{Remote: r}, nil
}
