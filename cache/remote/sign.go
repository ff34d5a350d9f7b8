package remote

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/publish"
)

// An entry's signature is a DSSE envelope (publish.SignEnvelope, the
// attestations' signing: RSA or Ed25519, key id the certificate's hash)
// in the manifest annotation annotationSignature. Its payload binds the
// step key to the seal's digest; the seal names every file's sha256,
// size, mode and link, and checkManifest holds each layer to it, so the
// signature covers the whole tree. It lives in the manifest rather than
// in a referrer: it arrives with the one GET that fetches the entry, is
// there exactly when the entry is (no window in which a tag names an
// entry whose signature is not pushed yet), and needs nothing of the
// registry beyond manifests (docker-registry has no referrers API, and
// the tag fallback is a shared index that concurrent pushers rewrite).
const (
	// SignatureType is the DSSE payload type of an entry's signature.
	SignatureType = "application/vnd.ironcore.os-builder.cache.signature.v1+json"
	// annotationSignature holds the envelope, compact JSON.
	annotationSignature = "dev.ironcore.os-builder.cache.signature"
	// maxSignatureSize bounds the envelope before it is parsed: one
	// RSA-4096 signature is under 1 KiB.
	maxSignatureSize = 64 << 10
)

// ErrUntrusted is an entry not signed by a key the puller trusts
// (unsigned, signed by another key, or changed after signing): a miss.
var ErrUntrusted = errors.New("not signed by a trusted key")

// SignWith makes Push sign entries with key, whose certificate is cert
// (the certificate is what pullers trust: publish.CertificateID is the
// signature's key id).
func SignWith(key crypto.Signer, cert *x509.Certificate) Option {
	return func(c *config) { c.signer, c.cert = key, cert }
}

// Trust makes Pull accept entries signed by any of certs' keys.
func Trust(certs ...*x509.Certificate) Option {
	return func(c *config) { c.trusted = append(c.trusted, certs...) }
}

// TrustUnsigned makes Pull accept entries whatever their signature: for
// a repository only trusted builders can write.
func TrustUnsigned() Option { return func(c *config) { c.unsigned = true } }

// entryClaim is the signed payload.
type entryClaim struct {
	Key  string `json:"key"`
	Seal string `json:"seal"` // the config descriptor's digest
}

// signature is the envelope Push annotates an entry with ("" unsigned).
func (c *config) signature(key string, seal v1.Hash) (string, error) {
	if c.signer == nil {
		return "", nil
	}
	payload, err := json.Marshal(entryClaim{Key: key, Seal: seal.String()})
	if err != nil {
		return "", err
	}
	env, err := publish.SignEnvelope(c.signer, c.cert, SignatureType, payload)
	if err != nil {
		return "", fmt.Errorf("sign entry %.12s: %w", key, err)
	}
	return string(env), nil
}

// verify checks a fetched manifest's signature: by a trusted key, over
// this key and this manifest's seal. Any failure wraps ErrUntrusted.
func (c *config) verify(man *v1.Manifest, key string) error {
	if c.unsigned {
		return nil
	}
	raw, ok := man.Annotations[annotationSignature]
	if !ok {
		return fmt.Errorf("%w: unsigned", ErrUntrusted)
	}
	env, claim, err := parseSignature(raw)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUntrusted, err)
	}
	if err := verifyBy(env, c.trusted); err != nil {
		return err
	}
	if claim.Key != key || claim.Seal != man.Config.Digest.String() {
		return fmt.Errorf("%w: the signature is over key %.12s and seal %s, the entry is %.12s with seal %s", ErrUntrusted, claim.Key, claim.Seal, key, man.Config.Digest)
	}
	return nil
}

// verifyBy is nil if a signature of env verifies under one of certs.
func verifyBy(env *publish.Envelope, certs []*x509.Certificate) error {
	for _, cert := range certs {
		if env.Verify(cert) == nil {
			return nil
		}
	}
	ids := make([]string, 0, len(env.Signatures))
	for _, s := range env.Signatures {
		ids = append(ids, fmt.Sprintf("%.12s", s.KeyID))
	}
	return fmt.Errorf("%w: signed by key %s, trusted are %d other keys (or the entry changed after signing)", ErrUntrusted, strings.Join(ids, ", "), len(certs))
}

// parseSignature decodes an entry's signature annotation: a bounded DSSE
// envelope of SignatureType whose payload is exactly an entryClaim.
func parseSignature(raw string) (*publish.Envelope, *entryClaim, error) {
	if len(raw) > maxSignatureSize {
		return nil, nil, fmt.Errorf("signature: %d bytes, more than %d", len(raw), maxSignatureSize)
	}
	env, payload, err := publish.ParseEnvelope([]byte(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("signature: %w", err)
	}
	if env.PayloadType != SignatureType {
		return nil, nil, fmt.Errorf("signature: payload type %q, want %q", env.PayloadType, SignatureType)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	var claim entryClaim
	if err := dec.Decode(&claim); err != nil {
		return nil, nil, fmt.Errorf("signature: payload: %w", err)
	}
	if dec.More() {
		return nil, nil, errors.New("signature: payload: data after the claim")
	}
	return env, &claim, nil
}

// upToDate reports whether the entry tagged key is the one Push would
// push: with a signer, the same seal signed the same way (RSA PKCS #1
// v1.5 and Ed25519 signatures are deterministic), so an unsigned entry,
// another key's or a changed one is pushed over; without one, any entry.
func (r *Repo) upToDate(ctx context.Context, key string, seal v1.Hash, sig string) (bool, error) {
	if sig == "" {
		return r.Has(ctx, key)
	}
	t, err := r.tag(key)
	if err != nil {
		return false, err
	}
	d, err := r.puller.Get(ctx, t)
	switch {
	case isNotFound(err):
		return false, nil
	case err != nil:
		return false, err
	case len(d.Manifest) > maxManifestSize:
		return false, nil
	}
	var man v1.Manifest
	if json.Unmarshal(d.Manifest, &man) != nil {
		return false, nil
	}
	return man.Config.Digest == seal && man.Annotations[annotationSignature] == sig, nil
}
