// Command nativedpkg is dpkg-deb and dpkg-split, as far as dpkg calls them
// while it unpacks, for a foreign architecture's bootstrap: the builder
// puts it first on the PATH inside the tree under both names, so dpkg
// (emulated by qemu-user) starts it natively instead of an emulated
// dpkg-deb that decompresses every package in emulation. Every other call,
// and a package it does not read (internal/debpkg's ErrUnsupported), goes
// to the tree's own tool, which it execs in place.
//
// It is static: it runs in the tree, whose libraries are another
// architecture's.
package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/ironcore-dev/os-builder/internal/debpkg"
)

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if name != "dpkg-deb" && name != "dpkg-split" {
		fmt.Fprintln(os.Stderr, "nativedpkg: run as dpkg-deb or dpkg-split (a link of that name)")
		os.Exit(2)
	}
	var err error
	switch {
	case name == "dpkg-deb" && len(args) == 2 && args[0] == "--fsys-tarfile":
		err = debpkg.FsysTarfile(os.Stdout, args[1])
	case name == "dpkg-deb" && len(args) == 3 && args[0] == "--control":
		err = debpkg.Control(args[1], args[2])
	case name == "dpkg-split" && len(args) == 3 && args[0] == "-Qao":
		// dpkg asks of every package whether it is a split part
		// (exit 1: no, quietly); parts go to the real dpkg-split.
		var part bool
		if part, err = debpkg.IsSplitPart(args[2]); err == nil && !part {
			os.Exit(1)
		}
		if err == nil {
			err = debpkg.ErrUnsupported
		}
	default:
		err = debpkg.ErrUnsupported
	}
	if errors.Is(err, debpkg.ErrUnsupported) {
		real := filepath.Join("/usr/bin", name)
		err = syscall.Exec(real, append([]string{name}, args...), os.Environ())
		err = fmt.Errorf("exec %s: %w", real, err)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s (native): %v\n", name, err)
		os.Exit(2)
	}
}
