package publish_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ironcore-dev/os-builder/publish"
)

// selfSigned makes a certificate for key.
func selfSigned(t testing.TB, key crypto.Signer) *x509.Certificate {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestPAE: the DSSE spec's example.
func TestPAE(t *testing.T) {
	got := string(publish.PAE("http://example.com/HelloWorld", []byte("hello world")))
	if want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"; got != want {
		t.Errorf("PAE = %q, want %q", got, want)
	}
}

// TestEnvelope: an envelope verifies under its certificate and under no
// other; a changed payload or payloadType fails; ECDSA keys are refused
// (their signatures differ per push).
func TestEnvelope(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	other := selfSigned(t, otherKey)
	payload := []byte(`{"_type":"https://in-toto.io/Statement/v1"}`)
	for _, key := range []crypto.Signer{rsaKey, edKey} {
		cert := selfSigned(t, key)
		b, err := publish.SignEnvelope(key, cert, publish.ArtifactTypeInToto, payload)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := publish.SignEnvelope(key, cert, publish.ArtifactTypeInToto, payload)
		if string(again) != string(b) {
			t.Errorf("%T: signing is not deterministic", key)
		}
		tamper := func(f func(e *publish.Envelope)) *publish.Envelope {
			var e publish.Envelope
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatal(err)
			}
			f(&e)
			return &e
		}
		for _, tc := range []struct {
			name string
			env  *publish.Envelope
			cert *x509.Certificate
			ok   bool
		}{
			{"as signed", tamper(func(*publish.Envelope) {}), cert, true},
			{"other certificate", tamper(func(*publish.Envelope) {}), other, false},
			{"payload changed", tamper(func(e *publish.Envelope) {
				e.Payload = base64.StdEncoding.EncodeToString([]byte(`{"_type":"x"}`))
			}), cert, false},
			{"payloadType changed", tamper(func(e *publish.Envelope) { e.PayloadType = publish.ArtifactTypeSPDX }), cert, false},
			{"keyid of another", tamper(func(e *publish.Envelope) { e.Signatures[0].KeyID = publish.CertificateID(other) }), cert, false},
		} {
			err := tc.env.Verify(tc.cert)
			if (err == nil) != tc.ok || err != nil && !errors.Is(err, publish.ErrBadSignature) {
				t.Errorf("%T %s: Verify = %v, want ok %v", key, tc.name, err, tc.ok)
			}
		}
		env, got, err := publish.ParseEnvelope(b)
		if err != nil || string(got) != string(payload) || env.PayloadType != publish.ArtifactTypeInToto {
			t.Errorf("ParseEnvelope: %v %q %+v", err, got, env)
		}
	}
	if _, err := publish.SignEnvelope(ecKey, selfSigned(t, ecKey), publish.ArtifactTypeInToto, payload); err == nil {
		t.Error("an ECDSA key signed an attestation")
	}
}
