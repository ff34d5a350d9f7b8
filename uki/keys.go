package uki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// Key file names written by GenerateKey, named after the UEFI db variable
// the certificate is meant to be enrolled in.
const (
	KeyFile  = "db.key"
	CertFile = "db.crt"
)

// keyBits is the RSA size of generated keys: 2048 is what firmware is
// guaranteed to verify (UEFI spec) and keeps signing fast.
const keyBits = 2048

// GenerateKey creates dir/db.key (PKCS#8 PEM RSA key, mode 0600) and
// dir/db.crt (self-signed X.509 certificate with the code-signing extended
// key usage, valid for 20 years) for signing UKIs. Existing files are never
// overwritten.
func GenerateKey(dir, commonName string) error {
	if commonName == "" {
		return errors.New("uki: genkey: common name is empty")
	}
	key, err := rsa.GenerateKey(rand.Reader, keyBits)
	if err != nil {
		return fmt.Errorf("uki: genkey: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return fmt.Errorf("uki: genkey: %w", err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(20, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		BasicConstraintsValid: true,
	}
	certDER, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("uki: genkey: creating certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("uki: genkey: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("uki: genkey: %w", err)
	}
	keyPath, certPath := filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile)
	for _, p := range []string{keyPath, certPath} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("uki: genkey: %s already exists; not overwriting", p)
		}
	}
	if err := writeNew(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	if err := writeNew(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}), 0o644); err != nil {
		os.Remove(keyPath)
		return err
	}
	return nil
}

func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("uki: genkey: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("uki: genkey: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return fmt.Errorf("uki: genkey: writing %s: %w", path, err)
	}
	return nil
}

// AllowInsecureKeyModeEnv, set to 1, lets LoadSigner use a private key
// file that group or others may access (a key mounted from a Kubernetes
// secret with the default mode 0644, say). Without it such a key is
// refused, as ssh refuses one.
const AllowInsecureKeyModeEnv = "OSB_ALLOW_INSECURE_KEY_MODE"

// LoadSigner reads a PEM private key (PKCS#8, PKCS#1 or SEC 1) and a PEM or
// DER certificate, and checks that they belong together. A key file with
// any group or other permission bit is refused unless
// OSB_ALLOW_INSECURE_KEY_MODE=1: whoever can read it can sign for the
// machines that trust its certificate, whoever can write it can swap it.
func LoadSigner(keyPath, certPath string) (crypto.Signer, *x509.Certificate, error) {
	keyPEM, err := readPrivateKeyFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	key, err := parsePrivateKey(keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("uki: loading key %s: %w", keyPath, err)
	}
	cert, err := LoadCertificate(certPath)
	if err != nil {
		return nil, nil, err
	}
	type equaler interface{ Equal(crypto.PublicKey) bool }
	if pub, ok := key.Public().(equaler); !ok || !pub.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("uki: certificate %s does not match key %s", certPath, keyPath)
	}
	return key, cert, nil
}

// maxKeyFile bounds what is read of a key file: PEM keys are KiBs.
const maxKeyFile = 1 << 20

// readPrivateKeyFile reads a key file after checking, on the opened file,
// that only its owner may access it.
func readPrivateKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("uki: loading key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("uki: loading key: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && os.Getenv(AllowInsecureKeyModeEnv) != "1" {
		return nil, fmt.Errorf("uki: private key %s has mode %#o: group or others may access it; chmod 600 it (or set %s=1 to use it anyway)", path, perm, AllowInsecureKeyModeEnv)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("uki: loading key %s: %w", path, err)
	}
	if len(b) > maxKeyFile {
		return nil, fmt.Errorf("uki: loading key %s: larger than %d bytes", path, maxKeyFile)
	}
	return b, nil
}

// LoadCertificate reads a PEM or DER certificate.
func LoadCertificate(certPath string) (*x509.Certificate, error) {
	certData, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("uki: loading certificate: %w", err)
	}
	if b, _ := pem.Decode(certData); b != nil {
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("uki: loading certificate %s: PEM block is %q, want CERTIFICATE", certPath, b.Type)
		}
		certData = b.Bytes
	}
	cert, err := x509.ParseCertificate(certData)
	if err != nil {
		return nil, fmt.Errorf("uki: loading certificate %s: %w", certPath, err)
	}
	return cert, nil
}

func parsePrivateKey(data []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM block found")
	}
	switch b.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, err
		}
		switch k := k.(type) {
		case *rsa.PrivateKey:
			return k, nil
		case *ecdsa.PrivateKey:
			return k, nil
		case ed25519.PrivateKey:
			return k, nil
		}
		return nil, fmt.Errorf("unsupported key type %T", k)
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	}
	return nil, fmt.Errorf("PEM block is %q, want a private key", b.Type)
}
