// Command embedinit builds the init (cmd/init) and the bootstrap's native
// dpkg-deb (cmd/nativedpkg) for every architecture a recipe may name into
// DIR, plus DIR/overlay.json, which `make builder` passes to go build
// -overlay so that cmd/builder (built with -tags osb_embed_init) embeds
// them. They are built exactly as a builder running in the source tree
// builds them (programs.BuildProgram), so both give the same bytes.
//
// Run it in the source tree: go run ./cmd/embedinit DIR
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ironcore-dev/os-builder/builder/programs"
	"github.com/ironcore-dev/os-builder/recipe"
)

// embedDir is where cmd/builder's go:embed looks, relative to the tree.
const embedDir = "cmd/builder/embedded"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: embedinit DIR")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "embedinit: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string) error {
	src, err := programs.FindSourceDir()
	if err != nil {
		return err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	overlay := map[string]string{}
	for _, arch := range recipe.Architectures {
		for _, program := range programs.Programs {
			name := programs.PrebuiltName(program, arch)
			out := filepath.Join(dir, name)
			if err := programs.BuildProgram(ctx, program, out, arch); err != nil {
				return err
			}
			overlay[filepath.Join(src, embedDir, name)] = out
		}
	}
	b, err := json.MarshalIndent(map[string]any{"Replace": overlay}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "overlay.json"), append(b, '\n'), 0o644)
}
