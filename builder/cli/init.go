package cli

import "github.com/ironcore-dev/os-builder/builder/programs"

// Init is the initrd's init the builder program carries: cmd/builder sets
// it when `make builder` embedded one. nil builds the init from source
// (programs.SourceInit), which needs Go.
var Init programs.InitSource
