package ocistore

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func sha256Of(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

// countingReader is an endless stream of 'x' that counts what was taken.
type countingReader struct{ n int64 }

func (c *countingReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	c.n += int64(len(p))
	return len(p), nil
}

func TestVerifyingReader(t *testing.T) {
	blob := []byte("the blob's bytes\n")
	d := sha256Of(blob)
	s512 := sha512.Sum512(blob)
	d512 := v1.Hash{Algorithm: "sha512", Hex: hex.EncodeToString(s512[:])}
	altered := bytes.Clone(blob)
	altered[3] = 'X'
	for _, tc := range []struct {
		name    string
		data    []byte
		want    v1.Hash
		size    int64
		wantErr string // empty: the bytes come back unchanged
	}{
		{name: "exact", data: blob, want: d, size: int64(len(blob))},
		{name: "sha512", data: blob, want: d512, size: int64(len(blob))},
		{name: "empty", data: nil, want: sha256Of(nil), size: 0},
		{name: "altered, same size", data: altered, want: d, size: int64(len(blob)), wantErr: "digest mismatch: expected " + d.String()},
		{name: "short", data: blob[:5], want: d, size: int64(len(blob)), wantErr: "(5 bytes)"},
		{name: "long", data: append(bytes.Clone(blob), '!'), want: d, size: int64(len(blob)), wantErr: "more than the 17 bytes"},
		{name: "unknown algorithm", data: blob, want: v1.Hash{Algorithm: "md5", Hex: d.Hex}, size: 17, wantErr: `unsupported algorithm "md5"`},
		{name: "hex with a path in it", data: blob, want: v1.Hash{Algorithm: "sha256", Hex: "../../" + d.Hex[6:]}, size: 17, wantErr: "not lower-case hex"},
		{name: "short hex", data: blob, want: v1.Hash{Algorithm: "sha256", Hex: "ab"}, size: 17, wantErr: "want 64 hex digits"},
		{name: "negative size", data: blob, want: d, size: -1, wantErr: "negative size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := io.ReadAll(NewVerifyingReader(io.NopCloser(bytes.NewReader(tc.data)), "blob", tc.want, tc.size))
			if tc.wantErr == "" {
				if err != nil || !bytes.Equal(got, tc.data) {
					t.Fatalf("got %q, %v", got, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "blob: ") {
				t.Fatalf("err = %v, want one naming the blob and %q", err, tc.wantErr)
			}
			if int64(len(got)) > max(tc.size, 0) {
				t.Errorf("handed out %d bytes, more than the %d recorded", len(got), tc.size)
			}
		})
	}
}

// TestVerifyingReaderBounded: an endless blob is cut off after size+1
// bytes, whatever buffer the caller reads with.
func TestVerifyingReaderBounded(t *testing.T) {
	src := &countingReader{}
	r := NewVerifyingReader(io.NopCloser(src), "endless", sha256Of(nil), 1000)
	_, err := io.CopyBuffer(io.Discard, r, make([]byte, 1<<20))
	if !errors.Is(err, ErrDigestMismatch) {
		t.Fatalf("err = %v", err)
	}
	if src.n > 1001 {
		t.Errorf("read %d bytes from the source, want at most size+1 = 1001", src.n)
	}
	// The failure sticks.
	if n, err2 := r.Read(make([]byte, 10)); n != 0 || err2 == nil {
		t.Errorf("read after failure: %d, %v", n, err2)
	}
}

func TestReadVerifiedBoundsBeforeReading(t *testing.T) {
	src := &countingReader{}
	_, err := readVerified(io.NopCloser(src), "manifest", v1.Descriptor{Digest: sha256Of(nil), Size: MaxManifestSize + 1}, MaxManifestSize)
	if err == nil || !strings.Contains(err.Error(), "over the 4194304-byte limit") {
		t.Fatalf("err = %v", err)
	}
	if src.n != 0 {
		t.Errorf("read %d bytes of an oversized blob", src.n)
	}
}

// FuzzVerifyingReader: whatever the bytes, the reader succeeds exactly
// when they are the recorded ones, and never hands out more than size.
func FuzzVerifyingReader(f *testing.F) {
	f.Add([]byte("the blob's bytes\n"), []byte("the blob's bytes\n"), 1)
	f.Add([]byte("abc"), []byte("abd"), 7)
	f.Add([]byte("abc"), []byte("abcd"), 4096)
	f.Fuzz(func(t *testing.T, recorded, got []byte, chunk int) {
		chunk = 1 + int(uint(chunk)%8192)
		r := NewVerifyingReader(io.NopCloser(bytes.NewReader(got)), "blob", sha256Of(recorded), int64(len(recorded)))
		var out []byte
		buf := make([]byte, chunk)
		var err error
		for {
			var n int
			n, err = r.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				break
			}
		}
		ok := err == io.EOF
		if ok != bytes.Equal(recorded, got) {
			t.Fatalf("recorded %q, got %q: err = %v", recorded, got, err)
		}
		if !ok && !errors.Is(err, ErrDigestMismatch) {
			t.Fatalf("err = %v, want a digest mismatch", err)
		}
		if len(out) > len(recorded) {
			t.Fatalf("handed out %d bytes, %d recorded", len(out), len(recorded))
		}
	})
}
