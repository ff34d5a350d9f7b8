// Command ironcore-image-platform pulls an image the way ironcore-image
// v0.5.0's own `pull` does (its pull.Run: resolve, copy into its store),
// but with the target platform set (remote.DockerRegistryWithPlatform),
// which the v0.5.0 CLI does not expose: its `pull` takes an index's first
// manifest. It then reads the pulled image back from its store as the
// v0.5.0 `inspect` does (config decoded into ironcoreimage.Config, layers
// from the manifest) and prints, as JSON, the manifest's digest and
// platform, the config's command line and the kernel layer's
// (ironcoreimage.KernelLayerMediaType) digest and first bytes, enough for
// an architecture's magic. It also reports what ironcoreimage.ResolveImage
// says of the image: v0.5.0 refuses any layer media type it does not know
// (cmdline, disk, ...), a limit of that library function, not of pull.
//
// The test copies this file into a copy of the ironcore-image module and
// builds it there, so ironcore-image's go.mod decides every dependency.
//
// Usage: ironcore-image-platform STORE OS/ARCH REF
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	ironcoreimage "github.com/ironcore-dev/ironcore-image"
	"github.com/ironcore-dev/ironcore-image/cmd/common"
	"github.com/ironcore-dev/ironcore-image/cmd/pull"
	"github.com/ironcore-dev/ironcore-image/oci/image"
	"github.com/ironcore-dev/ironcore-image/oci/remote"
	"github.com/ironcore-dev/ironcore-image/oci/store"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// kernelHead is how much of the kernel layer is printed: past x86's
// "HdrS" at 0x202 and arm64's "ARM\x64" at 56.
const kernelHead = 1024

type result struct {
	Digest       string `json:"digest"`
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	CommandLine  string `json:"commandLine"`
	KernelDigest string `json:"kernelDigest"`
	KernelHead   []byte `json:"kernelHead"`
	// ResolveImage is ironcoreimage.ResolveImage's error, if any.
	ResolveImage string `json:"resolveImage,omitempty"`
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: ironcore-image-platform STORE OS/ARCH REF")
		os.Exit(2)
	}
	if err := run(context.Background(), os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, "ironcore-image-platform:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, storePath, platform, ref string) error {
	osName, arch, ok := strings.Cut(platform, "/")
	if !ok {
		return fmt.Errorf("platform %q: want OS/ARCH", platform)
	}
	target := &ocispec.Platform{OS: osName, Architecture: arch}
	registry := func() (*remote.Registry, error) { return remote.DockerRegistryWithPlatform(target) }
	if err := pull.Run(ctx, common.DefaultStoreFactory(&storePath), registry, ref); err != nil {
		return err
	}
	s, err := store.New(storePath)
	if err != nil {
		return err
	}
	img, err := s.Resolve(ctx, ref)
	if err != nil {
		return fmt.Errorf("resolve %s in the store: %w", ref, err)
	}
	desc := img.Descriptor()
	r := result{Digest: desc.Digest.String()}
	if desc.Platform != nil {
		r.OS, r.Architecture = desc.Platform.OS, desc.Platform.Architecture
	}
	if _, err := ironcoreimage.ResolveImage(ctx, img); err != nil {
		r.ResolveImage = err.Error()
	}
	configLayer, err := img.Config(ctx)
	if err != nil {
		return fmt.Errorf("%s: config: %w", ref, err)
	}
	crc, err := configLayer.Content(ctx)
	if err != nil {
		return fmt.Errorf("%s: config: %w", ref, err)
	}
	var config ironcoreimage.Config
	err = json.NewDecoder(crc).Decode(&config)
	crc.Close()
	if err != nil {
		return fmt.Errorf("%s: config: %w", ref, err)
	}
	r.CommandLine = config.CommandLine
	layers, err := img.Layers(ctx)
	if err != nil {
		return fmt.Errorf("%s: layers: %w", ref, err)
	}
	var kernel image.Layer
	for _, l := range layers {
		if l.Descriptor().MediaType == ironcoreimage.KernelLayerMediaType {
			kernel = l
		}
	}
	if kernel == nil {
		return fmt.Errorf("%s: no %s layer", ref, ironcoreimage.KernelLayerMediaType)
	}
	r.KernelDigest = kernel.Descriptor().Digest.String()
	rc, err := kernel.Content(ctx)
	if err != nil {
		return fmt.Errorf("kernel layer: %w", err)
	}
	defer rc.Close()
	r.KernelHead = make([]byte, kernelHead)
	n, err := io.ReadFull(rc, r.KernelHead)
	if err != nil && err != io.ErrUnexpectedEOF {
		return fmt.Errorf("kernel layer: %w", err)
	}
	r.KernelHead = r.KernelHead[:n]
	return json.NewEncoder(os.Stdout).Encode(r)
}
