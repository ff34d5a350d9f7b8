package publish

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ironcore-dev/os-builder/internal/ocirace"
	"github.com/ironcore-dev/os-builder/ocistore"
	"github.com/ironcore-dev/os-builder/osimage"
)

// The OCI 1.1 empty config of artifact manifests: the two bytes "{}".
const (
	emptyConfigMediaType = "application/vnd.oci.empty.v1+json"
	emptyConfig          = "{}"
)

// Attestation is one blob attached to an index as an OCI referrer.
type Attestation struct {
	ArtifactType string
	// MediaType is the blob's: ArtifactType when empty, DSSEMediaType for
	// a signed document.
	MediaType string
	Data      []byte
	// Annotations go on the referrer manifest.
	Annotations map[string]string
}

// AnnotationSigningCert, on a signed attestation's referrer manifest, is
// the signing certificate (base64 DER). It is trusted only as far as its
// SHA-256 is the one the verifier expects (manifest.json's secureBoot or a
// certificate it is given).
const AnnotationSigningCert = "org.ironcore.image.attestation.certificate"

// signAttestations wraps each attestation in a DSSE envelope signed by
// opts.Signer. The certificate must be the one the outputs' UKIs are
// signed with, where they are: one key vouches for the image.
func signAttestations(atts []Attestation, dirs []string, opts Options) ([]Attestation, error) {
	if opts.SignCert == nil {
		return nil, errors.New("signing attestations: no certificate for the key")
	}
	id := CertificateID(opts.SignCert)
	for _, d := range dirs {
		m, err := osimage.ReadManifest(d)
		if err != nil {
			return nil, err
		}
		if sb := m.SecureBoot; sb != nil && sb.Signed && sb.CertificateSHA256 != "" && sb.CertificateSHA256 != id {
			return nil, fmt.Errorf("signing attestations: certificate %s is not the certificate the %s/%s output was signed with (%s)", id, m.Recipe, m.Architecture, sb.CertificateSHA256)
		}
	}
	if err := checkUKISignatures(dirs, opts.SignCert); err != nil {
		return nil, fmt.Errorf("signing attestations: %w", err)
	}
	out := make([]Attestation, len(atts))
	for i, a := range atts {
		env, err := SignEnvelope(opts.Signer, opts.SignCert, a.ArtifactType, a.Data)
		if err != nil {
			return nil, err
		}
		ann := map[string]string{AnnotationSigningCert: base64.StdEncoding.EncodeToString(opts.SignCert.Raw)}
		for k, v := range a.Annotations {
			ann[k] = v
		}
		out[i] = Attestation{ArtifactType: a.ArtifactType, MediaType: DSSEMediaType, Data: env, Annotations: ann}
	}
	return out, nil
}

// Signature is how an attached document was signed: the certificate its
// envelope verified under.
type Signature struct {
	KeyID       string            `json:"keyid"`
	Certificate *x509.Certificate `json:"-"`
}

// openSigned checks a fetched attestation blob: a DSSE envelope must be of
// the referrer's artifactType and verify under the certificate its
// manifest carries; it returns the document and the signature (nil for
// an unsigned document).
func openSigned(f *fetched, artifactType string) ([]byte, *Signature, error) {
	if f.mediaType != DSSEMediaType {
		return f.data, nil, nil
	}
	env, payload, err := ParseEnvelope(f.data)
	if err != nil {
		return nil, nil, err
	}
	if env.PayloadType != artifactType {
		return nil, nil, fmt.Errorf("envelope of %s, listed as %s", env.PayloadType, artifactType)
	}
	der, err := base64.StdEncoding.DecodeString(f.annotations[AnnotationSigningCert])
	if err != nil || len(der) == 0 {
		return nil, nil, fmt.Errorf("signed %s without a certificate (%s)", artifactType, AnnotationSigningCert)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("signed %s: certificate: %w", artifactType, err)
	}
	if err := env.Verify(cert); err != nil {
		return nil, nil, err
	}
	return payload, &Signature{KeyID: CertificateID(cert), Certificate: cert}, nil
}

// Attestations returns the SBOM and the provenance statement for the
// index (digest index, pushed to repo) built from dirs.
func Attestations(dirs []string, repo, index string, p Provenance) ([]Attestation, error) {
	var manifests []*osimage.BuildManifest
	for _, d := range dirs {
		m, err := osimage.ReadManifest(d)
		if err != nil {
			return nil, err
		}
		manifests = append(manifests, m)
	}
	version := BuilderVersion()
	sbom, err := NewSBOM(manifests, index, version)
	if err != nil {
		return nil, err
	}
	prov, err := NewProvenance(manifests, repo, index, p, version)
	if err != nil {
		return nil, err
	}
	return []Attestation{
		{ArtifactType: ArtifactTypeSPDX, Data: sbom},
		{ArtifactType: ArtifactTypeInToto, Data: prov, Annotations: map[string]string{AnnotationPredicate: SLSAProvenanceType}},
	}, nil
}

// referrerImage is an OCI artifact manifest: artifactType, the empty
// config, the attestation as its one layer and subject = the index.
type referrerImage struct {
	raw   []byte
	layer v1.Layer
}

func newReferrerImage(a Attestation, subject v1.Descriptor) (v1.Image, error) {
	mt := a.MediaType
	if mt == "" {
		mt = a.ArtifactType
	}
	layer := static.NewLayer(a.Data, types.MediaType(mt))
	ld, err := partial.Descriptor(layer)
	if err != nil {
		return nil, err
	}
	cd, _, err := v1.SHA256(bytes.NewReader([]byte(emptyConfig)))
	if err != nil {
		return nil, err
	}
	mf := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  a.ArtifactType,
		Config:        v1.Descriptor{MediaType: emptyConfigMediaType, Digest: cd, Size: int64(len(emptyConfig)), Data: []byte(emptyConfig)},
		Layers:        []v1.Descriptor{{MediaType: ld.MediaType, Digest: ld.Digest, Size: ld.Size}},
		Subject:       &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations:   a.Annotations,
	}
	raw, err := json.Marshal(mf)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&referrerImage{raw: raw, layer: layer})
}

func (r *referrerImage) RawManifest() ([]byte, error)        { return r.raw, nil }
func (r *referrerImage) RawConfigFile() ([]byte, error)      { return []byte(emptyConfig), nil }
func (r *referrerImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (r *referrerImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, _ := r.layer.Digest(); d == h {
		return r.layer, nil
	}
	return nil, fmt.Errorf("referrer has no blob %s", h)
}

// pushReferrers attaches atts to the index subject in repo. go-containerregistry
// pushes each manifest by digest and, where the registry has no referrers
// API, adds it to the index under the fallback tag sha256-<hex>.
func pushReferrers(ctx context.Context, repo name.Repository, subject v1.Descriptor, atts []Attestation, opts Options) ([]v1.Descriptor, error) {
	var out []v1.Descriptor
	for _, a := range atts {
		img, err := newReferrerImage(a, subject)
		if err != nil {
			return nil, fmt.Errorf("%s referrer: %w", a.ArtifactType, err)
		}
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		if err := writeSharedBlobs(ctx, func() error { return remote.Write(repo.Digest(d.String()), img, opts.remoteOptions(ctx)...) }); err != nil {
			return nil, fmt.Errorf("push %s referrer of %s: %w", a.ArtifactType, subject.Digest, err)
		}
		out = append(out, v1.Descriptor{ArtifactType: a.ArtifactType, Digest: d})
	}
	return out, nil
}

// writeSharedBlobs runs a manifest write that uploads its blobs first, and
// runs it again (twice at most, a second apart) when the registry refuses
// the manifest for a blob the write has just uploaded. Pushes running at
// once share blobs (every referrer's config is the same "{}"; two pipeline
// jobs attach SBOMs at once), and docker-registry (distribution 2.8,
// filesystem storage) can answer a manifest PUT with DIGEST_INVALID and
// MANIFEST_BLOB_UNKNOWN while another upload's commit replaces the blob
// (seen in TestWorkflowJobsEndToEnd; TestConcurrentPushesShareBlobs).
// Once both commits are done the blob is there and the write goes through.
func writeSharedBlobs(ctx context.Context, write func() error) error {
	err := write()
	for try := 0; try < 2 && ocirace.SharedBlob(err); try++ {
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
		err = write()
	}
	return err
}

// Referrer is one manifest that names an index as its subject.
type Referrer struct {
	ArtifactType string `json:"artifactType"`
	Digest       string `json:"digest"`
	Size         int64  `json:"size"`
}

// listReferrers lists what refers to digest in repo, sorted by type and
// digest: through the referrers API, or the fallback tag where the
// registry has none.
func listReferrers(ctx context.Context, repo name.Repository, digest v1.Hash, opts Options) ([]Referrer, error) {
	idx, err := remote.Referrers(repo.Digest(digest.String()), opts.remoteOptions(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("referrers of %s: %w", digest, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("referrers of %s: %w", digest, err)
	}
	out := []Referrer{}
	for _, d := range im.Manifests {
		out = append(out, Referrer{ArtifactType: d.ArtifactType, Digest: d.Digest.String(), Size: d.Size})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].ArtifactType != out[j].ArtifactType {
			return out[i].ArtifactType < out[j].ArtifactType
		}
		return out[i].Digest < out[j].Digest
	})
	return out, nil
}

// fetched is an attestation blob with its media type and its referrer
// manifest's annotations.
type fetched struct {
	data        []byte
	mediaType   string
	annotations map[string]string
}

// fetchAttestation reads the one blob of the referrer manifest r in repo
// after checking that the manifest names subject and has r's artifactType;
// the blob's size is bounded before it is read and its digest checked
// while reading.
func fetchAttestation(ctx context.Context, repo name.Repository, r Referrer, subject v1.Hash, opts Options) (*fetched, error) {
	img, err := remote.Image(repo.Digest(r.Digest), opts.remoteOptions(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("referrer %s: %w", r.Digest, err)
	}
	d, err := v1.NewHash(r.Digest)
	if err != nil {
		return nil, err
	}
	if err := osimage.VerifyManifest(img, v1.Descriptor{Digest: d, Size: r.Size}); err != nil {
		return nil, fmt.Errorf("referrer %s: %w", r.Digest, err)
	}
	mf, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("referrer %s: %w", r.Digest, err)
	}
	switch {
	case mf.Subject == nil || mf.Subject.Digest != subject:
		return nil, fmt.Errorf("referrer %s: subject is not %s", r.Digest, subject)
	case mf.ArtifactType != r.ArtifactType:
		return nil, fmt.Errorf("referrer %s: artifactType %q, listed as %q", r.Digest, mf.ArtifactType, r.ArtifactType)
	case len(mf.Layers) != 1:
		return nil, fmt.Errorf("referrer %s: %d blobs, want 1", r.Digest, len(mf.Layers))
	case mf.Layers[0].Size < 0 || mf.Layers[0].Size > maxAttestationSize:
		return nil, fmt.Errorf("referrer %s: blob of %d bytes (limit %d)", r.Digest, mf.Layers[0].Size, maxAttestationSize)
	}
	ld := mf.Layers[0]
	l, err := remote.Layer(repo.Digest(ld.Digest.String()), opts.remoteOptions(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("referrer %s blob: %w", r.Digest, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, fmt.Errorf("referrer %s blob: %w", r.Digest, err)
	}
	vr := ocistore.NewVerifyingReader(rc, r.ArtifactType, ld.Digest, ld.Size)
	defer vr.Close()
	b, err := io.ReadAll(vr)
	if err != nil {
		return nil, fmt.Errorf("referrer %s blob: %w", r.Digest, err)
	}
	return &fetched{data: b, mediaType: string(ld.MediaType), annotations: mf.Annotations}, nil
}
