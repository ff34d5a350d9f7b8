// Command redfish-emulator runs the protocol-tier Redfish BMC emulator
// (package redfishemu) on a TCP address.
package main

import (
	"context"
	"os"

	"github.com/ironcore-dev/os-builder/redfishemu"
)

func main() {
	os.Exit(redfishemu.Main(context.Background(), os.Args[1:], os.Stderr))
}
