// Command serverboot boots a server through its BMC the way its image says
// it boots. All logic lives in boot/cli; see docs/boot-driver.md.
package main

import (
	"context"
	"os"

	"github.com/ironcore-dev/os-builder/boot/cli"
)

func main() {
	os.Exit(cli.Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
