package osimage

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/ocistore"
)

// ErrDigestMismatch is returned (wrapped) when an artifact's bytes do not
// hash to the sha256 that manifest.json records for it: the one error every
// digest check of the project wraps.
var ErrDigestMismatch = ocistore.ErrDigestMismatch

// AnnotationCreated is the OCI pre-defined creation time annotation; we set it
// from SourceDateEpoch so that it does not break reproducibility.
const AnnotationCreated = "org.opencontainers.image.created"

// ImageConfig is the config blob (MediaTypeConfig). CommandLine is the only
// field boot-operator and ironcore-image read; the rest is our boot identity,
// duplicated from the annotations so that a consumer holding only the config
// has it too.
type ImageConfig struct {
	CommandLine    string            `json:"commandLine"`
	BootMethods    []BootMethod      `json:"bootMethods"`
	DefaultBoot    BootMethod        `json:"defaultBoot"`
	InstallModes   []InstallMode     `json:"installModes"`
	Architecture   string            `json:"architecture"`
	OSRelease      map[string]string `json:"osRelease,omitempty"`
	Recipe         string            `json:"recipe"`
	Version        string            `json:"version"`
	ExcludedLayers []string          `json:"excludedLayers,omitempty"`
}

// kindOrder fixes the layer order in the manifest (and so its digest):
// the PXE set first, then the other boot artifacts, manifest.json last.
var kindOrder = []ArtifactKind{KindKernel, KindInitrd, KindRootfs, KindCmdline, KindInitrdNoRoot, KindUKI, KindStub, KindDisk, KindISO}

// kindMediaTypes maps an artifact kind to its layer media type.
var kindMediaTypes = map[ArtifactKind]string{
	KindKernel:       MediaTypeKernel,
	KindInitrd:       MediaTypeInitramfs,
	KindRootfs:       MediaTypeSquashfs,
	KindCmdline:      MediaTypeCmdline,
	KindInitrdNoRoot: MediaTypeInitramfsNoRoot,
	KindUKI:          MediaTypeUKI,
	KindStub:         MediaTypeStub,
	KindDisk:         MediaTypeDisk,
	KindISO:          MediaTypeISO,
}

// kindBoot is the boot method each artifact serves (layer annotation).
var kindBoot = map[ArtifactKind]BootMethod{
	KindKernel:       BootPXE,
	KindInitrd:       BootPXE,
	KindRootfs:       BootPXE,
	KindCmdline:      BootPXE,
	KindInitrdNoRoot: BootPXE,
	KindUKI:          BootUEFIHTTP,
	KindStub:         BootUEFIHTTP, // what a UKI for it is made of
	KindDisk:         BootDisk,
	KindISO:          BootVirtualMedia,
}

// MediaTypeOf returns the layer media type of an artifact kind.
func MediaTypeOf(kind ArtifactKind) (string, bool) {
	mt, ok := kindMediaTypes[kind]
	return mt, ok
}

// kindOf returns the artifact kind of a layer media type; manifest.json and
// unknown media types have none.
func kindOf(mediaType string) (ArtifactKind, bool) {
	for k, mt := range kindMediaTypes {
		if mt == mediaType {
			return k, true
		}
	}
	return "", false
}

// methodNeeds lists, per boot method, the artifact kinds it cannot do without.
var methodNeeds = map[BootMethod][]ArtifactKind{
	BootUEFIHTTP:     {KindUKI},
	BootPXE:          {KindKernel, KindInitrd},
	BootVirtualMedia: {KindISO},
	BootDisk:         {KindDisk},
}

// methodOrder is the preference order: the first supported method is the
// default boot method.
var methodOrder = []BootMethod{BootUEFIHTTP, BootPXE, BootVirtualMedia, BootDisk}

// DeriveBoot computes the boot methods (in preference order), the default
// method and the install modes from the artifact kinds present.
func DeriveBoot(kinds map[ArtifactKind]bool) (methods []BootMethod, def BootMethod, modes []InstallMode) {
	for _, m := range methodOrder {
		ok := true
		for _, k := range methodNeeds[m] {
			ok = ok && kinds[k]
		}
		if ok {
			methods = append(methods, m)
		}
	}
	if len(methods) > 0 {
		def = methods[0]
	}
	if kinds[KindInitrd] || kinds[KindUKI] {
		modes = append(modes, InstallMemory)
	}
	if kinds[KindDisk] {
		modes = append(modes, InstallDisk)
	}
	return methods, def, modes
}

// ReadManifest reads and parses manifest.json from an output directory.
func ReadManifest(dir string) (*BuildManifest, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("read build manifest: %w", err)
	}
	var m BuildManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return &m, nil
}

// NewImage builds the OCI image manifest of one output directory (one
// architecture). m is the parsed manifest.json of dir; nil reads it. Artifact
// layers are streamed from their files when the image is written, and their
// bytes are checked against the sha256 in manifest.json while streaming: a
// mismatch fails the write with ErrDigestMismatch. Sizes are checked here.
func NewImage(dir string, m *BuildManifest) (v1.Image, error) {
	if m == nil {
		var err error
		if m, err = ReadManifest(dir); err != nil {
			return nil, err
		}
	}
	if m.Architecture == "" {
		return nil, fmt.Errorf("build manifest in %s has no architecture", dir)
	}
	rawBuildManifest, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("read build manifest: %w", err)
	}

	byKind := map[ArtifactKind]Artifact{}
	for _, a := range m.Artifacts {
		if _, ok := kindMediaTypes[a.Kind]; !ok {
			return nil, fmt.Errorf("artifact %s: unknown kind %q", a.Path, a.Kind)
		}
		if _, dup := byKind[a.Kind]; dup {
			return nil, fmt.Errorf("artifact %s: a second %s artifact", a.Path, a.Kind)
		}
		byKind[a.Kind] = a
	}

	img := &artifactImage{layers: map[v1.Hash]partial.CompressedLayer{}}
	var descs []v1.Descriptor
	present := map[ArtifactKind]bool{}
	for _, kind := range kindOrder {
		a, ok := byKind[kind]
		if !ok {
			continue
		}
		layer, err := newFileLayer(dir, a)
		if err != nil {
			return nil, err
		}
		present[kind] = true
		img.layers[layer.digest] = layer
		descs = append(descs, v1.Descriptor{
			MediaType: layer.mediaType,
			Size:      layer.size,
			Digest:    layer.digest,
			Annotations: map[string]string{
				AnnotationTitle:        filepath.Base(a.Path),
				AnnotationArtifactBoot: string(kindBoot[kind]),
			},
		})
	}
	if len(descs) == 0 {
		return nil, fmt.Errorf("build manifest in %s lists no artifacts", dir)
	}
	bmLayer := static.NewLayer(rawBuildManifest, MediaTypeManifestJSON)
	bmDigest, _ := bmLayer.Digest()
	img.layers[bmDigest] = bmLayer
	descs = append(descs, v1.Descriptor{
		MediaType:   MediaTypeManifestJSON,
		Size:        int64(len(rawBuildManifest)),
		Digest:      bmDigest,
		Annotations: map[string]string{AnnotationTitle: ManifestFile},
	})

	methods, def, modes := DeriveBoot(present)
	if def == "" {
		return nil, fmt.Errorf("artifacts in %s support no boot method (need uki, kernel+initrd, iso or disk)", dir)
	}
	cfg := ImageConfig{
		CommandLine:    m.Cmdline,
		BootMethods:    methods,
		DefaultBoot:    def,
		InstallModes:   modes,
		Architecture:   m.Architecture,
		OSRelease:      m.OSRelease,
		Recipe:         m.Recipe,
		Version:        m.Version,
		ExcludedLayers: m.ExcludedLayers,
	}
	if img.rawConfig, err = json.Marshal(cfg); err != nil {
		return nil, fmt.Errorf("encode image config: %w", err)
	}
	cfgDigest, _, err := v1.SHA256(bytes.NewReader(img.rawConfig))
	if err != nil {
		return nil, err
	}

	manifest := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactTypeV1,
		Config: v1.Descriptor{
			MediaType: MediaTypeConfig,
			Size:      int64(len(img.rawConfig)),
			Digest:    cfgDigest,
		},
		Layers:      descs,
		Annotations: manifestAnnotations(m, methods, def, modes),
	}
	if img.rawManifest, err = json.Marshal(manifest); err != nil {
		return nil, fmt.Errorf("encode image manifest: %w", err)
	}
	return partial.CompressedToImage(img)
}

func manifestAnnotations(m *BuildManifest, methods []BootMethod, def BootMethod, modes []InstallMode) map[string]string {
	ann := map[string]string{
		AnnotationBootMethods:  joinStrings(methods),
		AnnotationBootDefault:  string(def),
		AnnotationInstallModes: joinStrings(modes),
		AnnotationArchitecture: m.Architecture,
		AnnotationCreated:      time.Unix(m.SourceDateEpoch, 0).UTC().Format(time.RFC3339),
	}
	set := func(k, v string) {
		if v != "" {
			ann[k] = v
		}
	}
	set(AnnotationCmdline, m.Cmdline)
	set(AnnotationRecipe, m.Recipe)
	set(AnnotationRecipeVersion, m.Version)
	set(AnnotationExcludedLayers, strings.Join(m.ExcludedLayers, ","))
	set(AnnotationSecureBoot, m.SecureBoot.String())
	for k, v := range m.OSRelease {
		switch lk := strings.ToLower(k); lk {
		case "id", "version_id", "version_codename", "pretty_name":
			set(AnnotationOSReleasePrefix+lk, v)
		}
	}
	return ann
}

func joinStrings[S ~string](xs []S) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = string(x)
	}
	return strings.Join(parts, ",")
}

// platformGroup is what an index holds for one platform: the v1 manifest
// first, then the V2 manifests in table order.
type platformGroup struct {
	v1 v1.Image
	v2 []V2Image
}

func newIndex(groups []platformGroup) (v1.ImageIndex, error) {
	type entry struct {
		arch string
		adds []mutate.IndexAddendum
	}
	var entries []entry
	seen := map[string]bool{}
	for _, g := range groups {
		mf, err := g.v1.Manifest()
		if err != nil {
			return nil, fmt.Errorf("read image manifest: %w", err)
		}
		arch := mf.Annotations[AnnotationArchitecture]
		if arch == "" {
			return nil, errors.New("image has no architecture annotation")
		}
		if seen[arch] {
			return nil, fmt.Errorf("two images for architecture %s", arch)
		}
		seen[arch] = true
		platform := &v1.Platform{OS: "linux", Architecture: arch}
		e := entry{arch: arch, adds: []mutate.IndexAddendum{{
			Add:        g.v1,
			Descriptor: v1.Descriptor{Platform: platform, ArtifactType: mf.ArtifactType},
		}}}
		for _, v2 := range g.v2 {
			spec, _ := v2SpecOfKind(v2.Kind)
			e.adds = append(e.adds, mutate.IndexAddendum{
				Add:        v2.Image,
				Descriptor: v1.Descriptor{Platform: platform, ArtifactType: spec.ArtifactType},
			})
		}
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return nil, errors.New("no images for the index")
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].arch < entries[j].arch })
	var adds []mutate.IndexAddendum
	for _, e := range entries {
		adds = append(adds, e.adds...)
	}
	return mutate.AppendManifests(empty.Index, adds...), nil
}

func v2SpecOfKind(k V2Kind) (V2Spec, bool) {
	for _, s := range v2Specs {
		if s.Kind == k {
			return s, true
		}
	}
	return V2Spec{}, false
}

// IndexOptions shape the index of output directories.
type IndexOptions struct {
	// NoV2 leaves the IronCore Image V2 manifests out (builder push
	// --no-v2). A build whose recipe says imageV2: false has none either.
	NoV2 bool
}

// NewIndexFromDirs builds the images of each output directory (one per
// architecture) and wraps them in one index: per architecture the v1
// manifest, then the V2 manifests (unless the build turned them off).
func NewIndexFromDirs(dirs ...string) (v1.ImageIndex, error) {
	return NewIndexOf(IndexOptions{}, dirs...)
}

// NewIndexOf is NewIndexFromDirs with options.
func NewIndexOf(opts IndexOptions, dirs ...string) (v1.ImageIndex, error) {
	var groups []platformGroup
	for _, dir := range dirs {
		m, err := ReadManifest(dir)
		if err != nil {
			return nil, fmt.Errorf("image of %s: %w", dir, err)
		}
		img, err := NewImage(dir, m)
		if err != nil {
			return nil, fmt.Errorf("image of %s: %w", dir, err)
		}
		g := platformGroup{v1: img}
		if !opts.NoV2 && !m.NoImageV2 {
			if g.v2, err = NewV2Images(dir, m); err != nil {
				return nil, fmt.Errorf("V2 images of %s: %w", dir, err)
			}
		}
		groups = append(groups, g)
	}
	return newIndex(groups)
}

// artifactImage implements partial.CompressedImageCore over precomputed
// manifest and config bytes; layers stream from files.
type artifactImage struct {
	rawManifest []byte
	rawConfig   []byte
	// configMediaType is the config's; empty means MediaTypeConfig (v1).
	configMediaType types.MediaType
	layers          map[v1.Hash]partial.CompressedLayer
}

func (i *artifactImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (i *artifactImage) RawConfigFile() ([]byte, error)      { return i.rawConfig, nil }
func (i *artifactImage) RawManifest() ([]byte, error)        { return i.rawManifest, nil }

func (i *artifactImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := i.layers[h]; ok {
		return l, nil
	}
	cfgDigest, _, err := v1.SHA256(bytes.NewReader(i.rawConfig))
	if err == nil && h == cfgDigest {
		mt := i.configMediaType
		if mt == "" {
			mt = MediaTypeConfig
		}
		return static.NewLayer(i.rawConfig, mt), nil
	}
	return nil, fmt.Errorf("image has no blob %s", h)
}

// fileLayer is an uncompressed layer whose bytes are one artifact file.
type fileLayer struct {
	path      string
	digest    v1.Hash
	size      int64
	mediaType types.MediaType
}

func newFileLayer(dir string, a Artifact) (*fileLayer, error) {
	if a.Path == "" || filepath.IsAbs(a.Path) || !filepath.IsLocal(a.Path) {
		return nil, fmt.Errorf("artifact %s: path %q is not inside the output directory", a.Kind, a.Path)
	}
	p := filepath.Join(dir, a.Path)
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", a.Kind, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("artifact %s: %s is not a regular file", a.Kind, p)
	}
	if st.Size() != a.Size {
		return nil, fmt.Errorf("artifact %s: %s has %d bytes, manifest.json says %d", a.Kind, p, st.Size(), a.Size)
	}
	sum, err := hex.DecodeString(a.SHA256)
	if err != nil || len(sum) != sha256.Size {
		return nil, fmt.Errorf("artifact %s: sha256 %q in manifest.json is not 64 hex digits", a.Kind, a.SHA256)
	}
	return &fileLayer{
		path:      p,
		digest:    v1.Hash{Algorithm: "sha256", Hex: strings.ToLower(a.SHA256)},
		size:      a.Size,
		mediaType: types.MediaType(kindMediaTypes[a.Kind]),
	}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return l.mediaType, nil }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	return l.Compressed()
}

// Compressed opens the file; the reader fails at EOF if the bytes read do not
// match the recorded size and digest.
func (l *fileLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, fmt.Errorf("open artifact: %w", err)
	}
	return ocistore.NewVerifyingReader(f, l.path, l.digest, l.size), nil
}
