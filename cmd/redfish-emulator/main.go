// Command redfish-emulator runs the Redfish BMC emulator (package
// redfishemu) on a TCP address; with --qemu, a real QEMU VM follows the
// emulated system (package redfishemu/qemutier).
package main

import (
	"context"
	"os"

	"github.com/ironcore-dev/os-builder/redfishemu"
	"github.com/ironcore-dev/os-builder/redfishemu/qemutier"
)

func main() {
	os.Exit(redfishemu.Main(context.Background(), os.Args[1:], os.Stderr, &qemutier.CLI{}))
}
