package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/osimage"
)

// outputSet is the artifacts a recipe asks for.
type outputSet map[string]bool

var knownOutputs = []string{"pxe", "uki", "disk", "iso"}

func parseOutputs(names []string) (outputSet, error) {
	if len(names) == 0 {
		names = []string{"pxe"}
	}
	set := outputSet{}
	for _, n := range names {
		ok := false
		for _, k := range knownOutputs {
			ok = ok || n == k
		}
		if !ok {
			return nil, fmt.Errorf("outputs: unknown output %q (want one of %s)", n, strings.Join(knownOutputs, ", "))
		}
		set[n] = true
	}
	return set, nil
}

// needsStub: UKI-based artifacts need systemd-stub from the image itself,
// so that stub and kernel come from the same release.
func (o outputSet) needsStub() bool { return o["uki"] || o["disk"] || o["iso"] }

// artifactInputs is what the artifact writers read.
type artifactInputs struct {
	assembled     string // assemble step output (kernel, root image, stub, ...)
	initrd        string // the live initrd
	cmdline       string
	epoch         int64
	name, version string
}

func (a *artifactInputs) kernel() string    { return filepath.Join(a.assembled, kernelImage) }
func (a *artifactInputs) rootImage() string { return filepath.Join(a.assembled, rootImage) }

// writeArtifacts writes the chosen artifacts into dir and describes them.
func writeArtifacts(ctx context.Context, out outputSet, in *artifactInputs, dir string) ([]osimage.Artifact, error) {
	var arts []osimage.Artifact
	add := func(kind osimage.ArtifactKind, name string) error {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		d, err := digestFile(p)
		if err != nil {
			return err
		}
		arts = append(arts, osimage.Artifact{Kind: kind, Path: name, Size: fi.Size(), SHA256: d})
		return nil
	}
	if out["pxe"] {
		for _, f := range []struct {
			kind osimage.ArtifactKind
			src  string
			name string
		}{
			{osimage.KindKernel, in.kernel(), "vmlinuz"},
			{osimage.KindInitrd, in.initrd, "initrd.img"},
			{osimage.KindRootfs, in.rootImage(), "root.squashfs"},
		} {
			if err := copyFile(f.src, filepath.Join(dir, f.name), 0o644); err != nil {
				return nil, fmt.Errorf("pxe: %w", err)
			}
			if err := add(f.kind, f.name); err != nil {
				return nil, err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cmdline"), []byte(in.cmdline+"\n"), 0o644); err != nil {
			return nil, err
		}
		if err := add(osimage.KindCmdline, "cmdline"); err != nil {
			return nil, err
		}
	}
	for _, o := range []string{"uki", "disk", "iso"} {
		if out[o] {
			return nil, fmt.Errorf("outputs: %s is not supported yet", o)
		}
	}
	return arts, nil
}
