package publish

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// DSSE (Dead Simple Signing Envelope, github.com/secure-systems-lab/dsse):
// the signature covers PAE(payloadType, payload), so neither can be
// swapped. Attestations pushed with a key are envelopes of this type.
const DSSEMediaType = "application/vnd.dsse.envelope.v1+json"

// Envelope is a DSSE envelope.
type Envelope struct {
	PayloadType string              `json:"payloadType"`
	Payload     string              `json:"payload"` // standard base64
	Signatures  []EnvelopeSignature `json:"signatures"`
}

// EnvelopeSignature is one signature; KeyID is the hex SHA-256 of the
// signing certificate's DER (what manifest.json's secureBoot records).
type EnvelopeSignature struct {
	KeyID string `json:"keyid,omitempty"`
	Sig   string `json:"sig"`
}

// PAE is DSSE's pre-authentication encoding:
// "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body.
func PAE(payloadType string, payload []byte) []byte {
	b := []byte("DSSEv1 " + strconv.Itoa(len(payloadType)) + " " + payloadType + " " + strconv.Itoa(len(payload)) + " ")
	return append(b, payload...)
}

// CertificateID is the key id of a certificate: the hex SHA-256 of its DER.
func CertificateID(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// SignEnvelope signs payload as payloadType. Only RSA (PKCS #1 v1.5,
// SHA-256) and Ed25519 keys: their signatures are deterministic, so
// pushing the same output again attaches nothing new.
func SignEnvelope(key crypto.Signer, cert *x509.Certificate, payloadType string, payload []byte) ([]byte, error) {
	if cert == nil {
		return nil, errors.New("dsse: no certificate for the key")
	}
	msg := PAE(payloadType, payload)
	var sig []byte
	var err error
	switch key.Public().(type) {
	case *rsa.PublicKey:
		sum := sha256.Sum256(msg)
		sig, err = key.Sign(nil, sum[:], crypto.SHA256)
	case ed25519.PublicKey:
		sig, err = key.Sign(nil, msg, crypto.Hash(0))
	default:
		return nil, fmt.Errorf("dsse: %T keys sign attestations differently on every push; use an RSA or Ed25519 key", key.Public())
	}
	if err != nil {
		return nil, fmt.Errorf("dsse: signing %s: %w", payloadType, err)
	}
	return json.Marshal(Envelope{PayloadType: payloadType, Payload: base64.StdEncoding.EncodeToString(payload),
		Signatures: []EnvelopeSignature{{KeyID: CertificateID(cert), Sig: base64.StdEncoding.EncodeToString(sig)}}})
}

// ParseEnvelope decodes an envelope and its payload.
func ParseEnvelope(b []byte) (*Envelope, []byte, error) {
	var e Envelope
	if err := json.Unmarshal(b, &e); err != nil {
		return nil, nil, fmt.Errorf("dsse envelope: %w", err)
	}
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		return nil, nil, fmt.Errorf("dsse envelope: payload: %w", err)
	}
	if e.PayloadType == "" || len(e.Signatures) == 0 {
		return nil, nil, errors.New("dsse envelope: no payloadType or no signature")
	}
	return &e, payload, nil
}

// ErrBadSignature means no signature of an envelope verifies under the
// certificate it was checked against.
var ErrBadSignature = errors.New("signature does not verify")

// Verify checks that a signature of e by cert (its key id) verifies over
// PAE(payloadType, payload).
func (e *Envelope) Verify(cert *x509.Certificate) error {
	payload, err := base64.StdEncoding.DecodeString(e.Payload)
	if err != nil {
		return fmt.Errorf("dsse envelope: payload: %w", err)
	}
	msg := PAE(e.PayloadType, payload)
	id := CertificateID(cert)
	for _, s := range e.Signatures {
		if s.KeyID != id {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err != nil {
			continue
		}
		switch pub := cert.PublicKey.(type) {
		case *rsa.PublicKey:
			sum := sha256.Sum256(msg)
			if rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) == nil {
				return nil
			}
		case ed25519.PublicKey:
			if ed25519.Verify(pub, msg, sig) {
				return nil
			}
		}
	}
	return fmt.Errorf("%s envelope: %w under certificate %s", e.PayloadType, ErrBadSignature, id)
}
