//go:build osb_embed_init

package main

import (
	"embed"
	"io/fs"

	"github.com/ironcore-dev/os-builder/builder/programs"
)

// The inits and native dpkg-debs `make builder` compiled (cmd/embedinit). They exist only
// in the -overlay it passes, never in the source tree, so no other build
// can embed a stale one.
//
//go:embed embedded/init-linux-amd64 embedded/init-linux-arm64 embedded/nativedpkg-linux-amd64 embedded/nativedpkg-linux-arm64
var embedded embed.FS

func carriedInit() programs.InitSource {
	sub, err := fs.Sub(embedded, "embedded")
	if err != nil {
		panic(err) // a constant, valid path
	}
	return programs.PrebuiltInits{FS: sub, From: "carried by the builder"}
}
