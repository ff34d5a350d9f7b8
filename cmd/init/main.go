// Command init is the initrd's PID 1; see package initrd/pid1.
package main

import "github.com/ironcore-dev/os-builder/initrd/pid1"

func main() { pid1.Main() }
