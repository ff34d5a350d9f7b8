package remote

import (
	"crypto"
	"crypto/x509"
)

// Option configures Open.
type Option func(*config)

type config struct {
	insecure bool
	signer   crypto.Signer
	cert     *x509.Certificate
	trusted  []*x509.Certificate
	unsigned bool
}

// Insecure allows plain HTTP to a registry that is not on loopback (the
// commands' --insecure). Without it only loopback registries are spoken
// to over plain HTTP; any other, private-range addresses included, is
// HTTPS or nothing.
func Insecure() Option { return func(c *config) { c.insecure = true } }
