// Command builder builds IronCore OS images from recipes; see builder/cli.
package main

import (
	"os"

	"github.com/ironcore-dev/os-builder/builder/cli"
)

func main() {
	cli.Init = carriedInit()
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
