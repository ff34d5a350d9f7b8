// Package ocistore reads OCI image layouts with every blob checked against
// the descriptor it was reached by (size and digest), and keeps the local
// OCI store that offline builds take their oci sources from.
// go-containerregistry's layout package trusts the files it opens; this
// package is the one way the project reads a layout.
package ocistore

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ErrDigestMismatch is wrapped when a blob's bytes do not have the size or
// digest its descriptor records.
var ErrDigestMismatch = errors.New("digest mismatch")

// MaxManifestSize bounds every blob read into memory: manifests, indexes,
// configs and a layout's index.json (registries use the same 4 MiB limit).
const MaxManifestSize = 4 << 20

// newHasher returns the hash for a digest's algorithm after checking that
// the digest is well-formed (it also names a file under blobs/).
func newHasher(d v1.Hash) (hash.Hash, error) {
	var h hash.Hash
	switch d.Algorithm {
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return nil, fmt.Errorf("digest %q: unsupported algorithm %q (want sha256 or sha512)", d, d.Algorithm)
	}
	if len(d.Hex) != 2*h.Size() {
		return nil, fmt.Errorf("digest %q: want %d hex digits", d, 2*h.Size())
	}
	for _, c := range d.Hex {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return nil, fmt.Errorf("digest %q: not lower-case hex", d)
		}
	}
	return h, nil
}

// NewVerifyingReader returns rc's bytes and fails, when rc ends, unless
// exactly size bytes hashing to want arrived. It never reads more than
// size+1 bytes from rc, so a blob longer than its descriptor cannot make a
// reader run on. A malformed digest or negative size fails the first Read.
// name says in errors which blob failed. Close closes rc.
func NewVerifyingReader(rc io.ReadCloser, name string, want v1.Hash, size int64) io.ReadCloser {
	v := &verifyingReader{rc: rc, name: name, want: want, size: size}
	h, err := newHasher(want)
	switch {
	case err != nil:
		v.err = fmt.Errorf("%s: %w", name, err)
	case size < 0:
		v.err = fmt.Errorf("%s: negative size %d", name, size)
	default:
		v.h = h
		v.r = io.LimitReader(rc, size+1)
	}
	return v
}

type verifyingReader struct {
	rc   io.ReadCloser
	r    io.Reader
	name string
	want v1.Hash
	size int64
	n    int64
	h    hash.Hash
	err  error // sticky: io.EOF once verified, or the failure
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	if v.n+int64(n) > v.size {
		n = int(v.size - v.n) // hand out no byte beyond the recorded size
		v.err = fmt.Errorf("%s: %w: more than the %d bytes its descriptor records", v.name, ErrDigestMismatch, v.size)
		v.h.Write(p[:n])
		v.n += int64(n)
		return n, v.err
	}
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case err == io.EOF:
		got := hex.EncodeToString(v.h.Sum(nil))
		if v.n != v.size || got != v.want.Hex {
			v.err = fmt.Errorf("%s: %w: expected %s (%d bytes), content is %s:%s (%d bytes)",
				v.name, ErrDigestMismatch, v.want, v.size, v.want.Algorithm, got, v.n)
			return n, v.err
		}
		v.err = io.EOF
	case err != nil:
		v.err = fmt.Errorf("%s: %w", v.name, err)
		return n, v.err
	}
	return n, err
}

func (v *verifyingReader) Close() error { return v.rc.Close() }

// readVerified reads a whole blob into memory after checking its recorded
// size against max, so a hostile descriptor cannot make it allocate more.
func readVerified(rc io.ReadCloser, name string, d v1.Descriptor, max int64) ([]byte, error) {
	defer rc.Close()
	if d.Size < 0 || d.Size > max {
		return nil, fmt.Errorf("%s: size %d is over the %d-byte limit for %s", name, d.Size, max, mediaTypeOr(d))
	}
	buf := make([]byte, 0, d.Size+1)
	for r := NewVerifyingReader(rc, name, d.Digest, d.Size); ; {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func mediaTypeOr(d v1.Descriptor) string {
	if d.MediaType == "" {
		return "a manifest or config"
	}
	return string(d.MediaType)
}
