//go:build !osb_embed_init

package main

import "github.com/ironcore-dev/os-builder/initrd"

// carriedInit: a builder from plain `go build` or `go install` carries no
// init; it builds one from source (see initrd.SourceInit).
func carriedInit() initrd.InitSource { return nil }
