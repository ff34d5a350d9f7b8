// Package ocirace recognises docker-registry's answer to a manifest that
// names a blob another client is still committing: the registry says the
// blob is unknown or its digest invalid for a moment, and the same request
// succeeds once the other upload has landed.
package ocirace

import (
	"errors"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// SharedBlob reports whether err is that transient answer.
func SharedBlob(err error) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) {
		return false
	}
	for _, d := range terr.Errors {
		if d.Code == transport.ManifestBlobUnknownErrorCode || d.Code == transport.BlobUnknownErrorCode || d.Code == transport.DigestInvalidErrorCode {
			return true
		}
	}
	return false
}
