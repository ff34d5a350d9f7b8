package remote

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/publish"
)

// fuzzSigner is an Ed25519 key (fast, deterministic) and its certificate.
func fuzzSigner(f *testing.F) (ed25519.PrivateKey, *x509.Certificate) {
	key := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize))
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fuzz"},
		NotBefore: time.Unix(0, 0), NotAfter: time.Unix(1<<33, 0)}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, key.Public(), key)
	if err != nil {
		f.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		f.Fatal(err)
	}
	return key, cert
}

// FuzzEntrySignature: an entry's signature annotation, as the registry
// hands it over (env), and a payload signed by the trusted key (so
// mutations reach past the signature to the claim's parsing). Neither
// panics; an entry is accepted only when a trusted signature's claim is
// exactly this key and this seal; a mutated envelope never verifies.
func FuzzEntrySignature(f *testing.F) {
	key, cert := fuzzSigner(f)
	const entryKey = "dec8fc51e62b13f5a4579ea49b5781c318e52aade004d58e12f0987150de5679"
	seal := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	c := &config{signer: key, cert: cert, trusted: []*x509.Certificate{cert}}
	good, err := c.signature(entryKey, seal)
	if err != nil {
		f.Fatal(err)
	}
	claim, _ := json.Marshal(entryClaim{Key: entryKey, Seal: seal.String()})
	f.Add([]byte(good), claim)
	f.Add([]byte(`{"payloadType":"`+SignatureType+`","payload":"e30=","signatures":[{"keyid":"x","sig":"AA=="}]}`), []byte(`{"key":"`+entryKey+`"}`))
	f.Add([]byte(`{}`), []byte(`{"key":"","seal":"","extra":1}`))
	f.Fuzz(func(t *testing.T, env, payload []byte) {
		man := &v1.Manifest{Config: v1.Descriptor{Digest: seal}, Annotations: map[string]string{annotationSignature: string(env)}}
		if err := c.verify(man, entryKey); err == nil {
			// Only the envelope Push makes verifies: Ed25519 signatures
			// are deterministic, and anything else is a forgery.
			if string(env) != good {
				var e publish.Envelope
				if json.Unmarshal(env, &e) != nil || e.PayloadType != SignatureType {
					t.Fatalf("accepted %q", env)
				}
			}
		} else if !errors.Is(err, ErrUntrusted) {
			t.Fatalf("refusal %v does not wrap ErrUntrusted", err)
		}
		signed, err := publish.SignEnvelope(key, cert, SignatureType, payload)
		if err != nil {
			t.Fatal(err)
		}
		man.Annotations[annotationSignature] = string(signed)
		err = c.verify(man, entryKey)
		var got entryClaim
		dec := json.NewDecoder(bytes.NewReader(payload))
		dec.DisallowUnknownFields()
		exact := dec.Decode(&got) == nil && !dec.More() && got.Key == entryKey && got.Seal == seal.String()
		if (err == nil) != exact {
			t.Fatalf("payload %q: verify %v, the claim is this entry's: %v", payload, err, exact)
		}
	})
}
