package remote

import "github.com/ironcore-dev/os-builder/internal/httpsonly"

// ErrPlainHTTP is a plain-HTTP request to a registry not on loopback made
// without Insecure (internal/httpsonly).
var ErrPlainHTTP = httpsonly.ErrPlainHTTP
