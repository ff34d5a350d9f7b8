//go:build !osb_embed_init

package main

import "github.com/ironcore-dev/os-builder/builder/programs"

// carriedInit: a builder from plain `go build` or `go install` carries no
// init; it builds one from source (see programs.SourceInit).
func carriedInit() programs.InitSource { return nil }
