package redfish

import (
	"context"

	"github.com/ironcore-dev/os-builder/boot"
)

// Dialer opens a Client with Config when a boot.Session connects: the
// session's BMCDialer, so an image or request mismatch costs no login.
type Dialer struct{ Config Config }

// DialBMC connects; the returned func closes the Client (logs out).
func (d Dialer) DialBMC(ctx context.Context) (boot.BMC, func(), error) {
	c, err := Connect(ctx, d.Config)
	if err != nil {
		return nil, nil, err
	}
	return c, func() { _ = c.Close() }, nil
}
