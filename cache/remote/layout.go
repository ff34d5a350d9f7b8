// Package remote keeps build cache entries in an OCI registry, so that
// builders on other machines (CI runners per architecture, developers'
// laptops) reuse the steps one of them has built. An entry is one OCI
// artifact in a repository, tagged by its step key:
//
//   - the manifest is an OCI image manifest with artifactType
//     ArtifactType, annotated with the step's name, the recipe of the
//     build that pushed it and when it was pushed;
//   - its config (media type SealType) is the entry's seal: the cache
//     meta file without this disk's file identities, compact JSON;
//   - each regular file of the entry, in seal order, is one layer (media
//     type FileType, the file's bytes as they are, titled by its path);
//     directories and symlinks are in the seal only.
//
// A pulled entry is checked against all of that: the manifest and the
// seal bounded in size, every blob's size and sha256 against the layer's
// descriptor and the seal, the key against the seal's inputs; it is then
// sealed anew on this disk (cache.Store.Import). Anything else is a miss.
// docs/build-graph.md describes the layout (TestLayoutDoc checks it).
package remote

import (
	"encoding/json"
	"fmt"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/cache"
)

const (
	// ArtifactType marks a manifest as an os-builder cache entry.
	ArtifactType = "application/vnd.ironcore.os-builder.cache.entry.v1"
	// SealType is the config: the entry's seal.
	SealType = "application/vnd.ironcore.os-builder.cache.seal.v1+json"
	// FileType is one regular file of the entry, uncompressed.
	FileType = "application/vnd.ironcore.os-builder.cache.file.v1"

	// Manifest annotations.
	annotationTitle   = "org.opencontainers.image.title"
	annotationCreated = "org.opencontainers.image.created"
	annotationStep    = "dev.ironcore.os-builder.cache.step"
	annotationRecipe  = "dev.ironcore.os-builder.cache.recipe"

	// maxManifestSize bounds a fetched manifest: an entry of 20,000
	// files is about 4 MB of descriptors.
	maxManifestSize = 8 << 20
	// maxSealSize bounds a fetched seal, as the store bounds its own.
	maxSealSize = 16 << 20
	// maxFileSize bounds one file of an entry (a bootstrap tree's image
	// is a few hundred MB).
	maxFileSize = 16 << 30
)

// sealBytes is the config blob of an entry: its seal without the file
// identities (device, inode, ctime mean nothing on another disk) and
// without the fill time, so every builder pushing the same entry pushes
// the same bytes.
func sealBytes(m *cache.Meta) ([]byte, error) {
	c := *m
	c.Created = time.Time{}
	c.Files = make([]cache.File, len(m.Files))
	for i, f := range m.Files {
		f.Dev, f.Ino, f.CTime = 0, 0, 0
		c.Files[i] = f
	}
	return json.Marshal(c)
}

// entryManifest is the manifest of an entry with the given seal.
func entryManifest(m *cache.Meta, seal []byte, recipe string, pushed time.Time) (*v1.Manifest, error) {
	sealHash, size, err := v1.SHA256(bytesReader(seal))
	if err != nil {
		return nil, err
	}
	man := &v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config:        v1.Descriptor{MediaType: SealType, Digest: sealHash, Size: size},
		Annotations: map[string]string{
			annotationStep:    m.Step,
			annotationCreated: pushed.UTC().Format(time.RFC3339),
		},
	}
	if recipe != "" {
		man.Annotations[annotationRecipe] = recipe
	}
	for _, f := range m.Files {
		if f.Kind() != "file" {
			continue
		}
		man.Layers = append(man.Layers, v1.Descriptor{
			MediaType:   FileType,
			Digest:      v1.Hash{Algorithm: "sha256", Hex: f.SHA256},
			Size:        f.Size,
			Annotations: map[string]string{annotationTitle: f.Path},
		})
	}
	return man, nil
}

// checkManifest checks a fetched manifest against the layout and the
// seal it names (and the seal's content, checkContent); it returns the seal's regular files in layer order.
func checkManifest(man *v1.Manifest, seal *cache.Meta, key string) ([]cache.File, error) {
	if seal.Key != key {
		return nil, fmt.Errorf("seal: key %s, tagged %s", seal.Key, key)
	}
	if err := checkContent(seal); err != nil {
		return nil, err
	}
	var files []cache.File
	for i, f := range seal.Files {
		switch f.Kind() {
		case "file":
			files = append(files, f)
		case "dir", "symlink":
		default:
			return nil, fmt.Errorf("seal: files[%d] %s: mode %v is not a file, directory or symlink", i, f.Path, f.Mode)
		}
	}
	if len(man.Layers) != len(files) {
		return nil, fmt.Errorf("manifest: %d layers, the seal lists %d regular files", len(man.Layers), len(files))
	}
	for i, l := range man.Layers {
		f := files[i]
		switch {
		case l.MediaType != FileType:
			return nil, fmt.Errorf("manifest: layers[%d]: media type %q, want %q", i, l.MediaType, FileType)
		case l.Annotations[annotationTitle] != f.Path:
			return nil, fmt.Errorf("manifest: layers[%d]: titled %q, the seal's file is %s", i, l.Annotations[annotationTitle], f.Path)
		case l.Digest.Algorithm != "sha256" || l.Digest.Hex != f.SHA256:
			return nil, fmt.Errorf("manifest: layers[%d] (%s): digest %s, sealed sha256:%s", i, f.Path, l.Digest, f.SHA256)
		case l.Size != f.Size || f.Size < 0 || f.Size > maxFileSize:
			return nil, fmt.Errorf("manifest: layers[%d] (%s): %d bytes, sealed %d (at most %d)", i, f.Path, l.Size, f.Size, int64(maxFileSize))
		}
	}
	return files, nil
}
