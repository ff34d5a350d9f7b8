package publish

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"strings"
	"testing"
	"time"
)

// TestOpenSigned: a signed attestation fetched from a registry is only
// its document when its envelope verifies under the certificate its
// manifest carries and is of the type it is listed as; anything else
// (a swapped payload, another type, another certificate, none) fails.
func TestOpenSigned(t *testing.T) {
	cert := func() (ed25519.PrivateKey, *x509.Certificate) {
		_, key, _ := ed25519.GenerateKey(rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(der)
		return key, c
	}
	key, c := cert()
	_, other := cert()
	doc := []byte(`{"_type":"https://in-toto.io/Statement/v1"}`)
	env, err := SignEnvelope(key, c, ArtifactTypeInToto, doc)
	if err != nil {
		t.Fatal(err)
	}
	swapped := func() []byte {
		var e Envelope
		_ = json.Unmarshal(env, &e)
		e.Payload = base64.StdEncoding.EncodeToString([]byte(`{"_type":"forged"}`))
		b, _ := json.Marshal(e)
		return b
	}()
	ann := func(c *x509.Certificate) map[string]string {
		return map[string]string{AnnotationSigningCert: base64.StdEncoding.EncodeToString(c.Raw)}
	}
	for _, tc := range []struct {
		name string
		f    fetched
		typ  string
		want string // error substring; "" = ok
	}{
		{"signed", fetched{data: env, mediaType: DSSEMediaType, annotations: ann(c)}, ArtifactTypeInToto, ""},
		{"unsigned document", fetched{data: doc, mediaType: ArtifactTypeInToto}, ArtifactTypeInToto, ""},
		{"payload swapped", fetched{data: swapped, mediaType: DSSEMediaType, annotations: ann(c)}, ArtifactTypeInToto, "does not verify"},
		{"listed as another type", fetched{data: env, mediaType: DSSEMediaType, annotations: ann(c)}, ArtifactTypeSPDX, "listed as"},
		{"another certificate", fetched{data: env, mediaType: DSSEMediaType, annotations: ann(other)}, ArtifactTypeInToto, "does not verify"},
		{"no certificate", fetched{data: env, mediaType: DSSEMediaType}, ArtifactTypeInToto, "without a certificate"},
		{"not an envelope", fetched{data: doc, mediaType: DSSEMediaType, annotations: ann(c)}, ArtifactTypeInToto, "dsse envelope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, sig, err := openSigned(&tc.f, tc.typ)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("openSigned: %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil || string(got) != string(doc) {
				t.Fatalf("openSigned: %q, %v", got, err)
			}
			if (sig != nil) != (tc.f.mediaType == DSSEMediaType) || sig != nil && sig.KeyID != CertificateID(c) {
				t.Errorf("signature %+v", sig)
			}
		})
	}
}
