package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/publish"
	"github.com/ironcore-dev/os-builder/uki"
)

func init() {
	extraCommands = append(extraCommands, newPush, newInspect, newGenkey)
}

// pushResult is what `push --json` prints.
type pushResult struct {
	Reference string   `json:"reference"`
	Digest    string   `json:"digest"`
	Tags      []string `json:"tags,omitempty"`
	// Architectures are the per-architecture references (VERSION-ARCH) of
	// an output of several architectures.
	Architectures []string `json:"architectures,omitempty"`
}

func newPush(stdout, _ io.Writer) *cobra.Command {
	var opts publish.Options
	var asJSON bool
	var signKey, signCert string
	c := &cobra.Command{
		Use:   "push OUTPUT [REF]",
		Short: "Publish a build output as an OCI image index (default: the OCI layout out/oci)",
		Long: `Push publishes OUTPUT (a directory written by 'builder build') with its
boot identity: per architecture the v1 manifest, then the IronCore Image V2
kinds (UKI, EFI, Disk; --no-v2 leaves them out). REF is a registry reference (registry/repo:tag) or oci:PATH[:TAG]
for a local OCI layout; without REF it goes to oci:out/oci:<version>.
An OUTPUT of several architectures (OUTPUT/ARCH, from a recipe with
base.architectures) becomes one index with a manifest per architecture,
and each architecture is also pushed alone under REF's tag -ARCH
(VERSION-amd64, VERSION-arm64), as IronCore's os-images tags them.
Credentials come from the docker config and the environment, never from flags.`,
		Args: icli.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := loadPushSigner(&opts, signKey, signCert); err != nil {
				return err
			}
			dirs, err := publish.OutputDirs(args[0])
			if err != nil {
				return exitcode.UsageError(err)
			}
			var ref string
			if len(args) == 2 {
				ref = args[1]
				if err := checkRef(ref, opts.Insecure); err != nil {
					return err
				}
			} else {
				// publish.Push's default, spelled out so that it can be reported.
				m, err := osimage.ReadManifest(dirs[0])
				if err != nil {
					return err
				}
				ref = publish.LayoutPrefix + publish.DefaultLayout + ":" + m.Version
			}
			h, archRefs, err := pushArchitectures(cmd.Context(), dirs, ref, opts)
			if err != nil {
				return err
			}
			if asJSON {
				return icli.WriteJSON(stdout, pushResult{Reference: ref, Digest: h.String(), Tags: opts.Tags, Architectures: archRefs})
			}
			_, err = fmt.Fprintln(stdout, h.String())
			return err
		},
	}
	icli.InsecureFlag(c.Flags(), &opts.Insecure)
	c.Flags().StringSliceVar(&opts.Tags, "tag", nil, "extra tags to push")
	c.Flags().BoolVar(&opts.NoV2, "no-v2", false, noV2Usage)
	icli.JSONFlag(c, &asJSON)
	// Recorded in the provenance attached to registry pushes.
	recipeFlag(c.Flags(), &opts.Provenance.Recipe)
	c.Flags().StringVar(&opts.Provenance.Lock, "lock", "", "provenance: the recipe's lock file (its sha256 is recorded)")
	c.Flags().StringVar(&opts.Provenance.SourceRepo, "source-repo", "", "provenance: source repository URI, e.g. git+https://github.com/ORG/REPO")
	c.Flags().StringVar(&opts.Provenance.SourceCommit, "source-commit", "", "provenance: full git commit built")
	c.Flags().StringVar(&opts.Provenance.BuilderID, "builder-id", "", "provenance: who ran the build, e.g. a CI run URL (default "+publish.DefaultBuilderID+")")
	c.Flags().StringVar(&signKey, "sign-key", "", "sign the SBOM and provenance (DSSE) with this PEM key: the build's --sign-key")
	c.Flags().StringVar(&signCert, "sign-cert", "", "PEM certificate for --sign-key: the build's --sign-cert")
	return c
}

func newInspect(stdout, _ io.Writer) *cobra.Command {
	var opts publish.Options
	var asJSON bool
	var verify []string
	var signCert string
	c := &cobra.Command{
		Use:   "inspect REF",
		Short: "Print an image's artifacts, boot identity and referrers (SBOM, provenance)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if signCert != "" {
				if len(verify) == 0 {
					return exitcode.UsageError(errors.New("--sign-cert needs --verify"))
				}
				var err error
				if opts.VerifyCert, err = uki.LoadCertificate(signCert); err != nil {
					return err
				}
			}
			if err := checkRef(args[0], opts.Insecure); err != nil {
				return err
			}
			inspect := publish.Inspect
			if len(verify) > 0 {
				inspect = func(ctx context.Context, ref string, opts publish.Options) (*publish.Inspection, error) {
					return publish.Verify(ctx, ref, verify, opts)
				}
			}
			ins, err := inspect(cmd.Context(), args[0], opts)
			if err != nil {
				return err
			}
			return publish.WriteInspection(stdout, ins, asJSON)
		},
	}
	icli.InsecureFlag(c.Flags(), &opts.Insecure)
	icli.JSONFlag(c, &asJSON)
	c.Flags().StringSliceVar(&verify, "verify", nil, "fail unless REF is exactly what 'builder push' makes of these output directories (an output of several architectures: each OUTPUT/ARCH against its platform's manifests), with SBOM and provenance attached (signed by the certificate the outputs are signed with, if they are)")
	c.Flags().StringVar(&signCert, "sign-cert", "", "with --verify: the SBOM and provenance must be signed with this certificate")
	return c
}

// genkeyResult is what `genkey --json` prints.
type genkeyResult struct {
	Key  string `json:"key"`
	Cert string `json:"cert"`
}

func newGenkey(stdout, _ io.Writer) *cobra.Command {
	var cn string
	var asJSON bool
	c := &cobra.Command{
		Use:   "genkey DIR",
		Short: "Make a Secure Boot signing key pair (db.key, db.crt) for tests and labs",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := uki.GenerateKey(args[0], cn); err != nil {
				return err
			}
			key, cert := filepath.Join(args[0], uki.KeyFile), filepath.Join(args[0], uki.CertFile)
			if asJSON {
				return icli.WriteJSON(stdout, genkeyResult{Key: key, Cert: cert})
			}
			_, err := fmt.Fprintf(stdout, "wrote %s and %s\n", key, cert)
			return err
		},
	}
	c.Flags().StringVar(&cn, "common-name", "os-builder test signing key", "certificate subject CN")
	icli.JSONFlag(c, &asJSON)
	return c
}

// noV2Usage is push's and index's --no-v2.
const noV2Usage = "publish the v1 manifests alone, without the IronCore Image V2 kinds (as the recipe's imageV2: false)"

// loadPushSigner fills opts' signer from push's and index's --sign-key and
// --sign-cert, which go together.
func loadPushSigner(opts *publish.Options, signKey, signCert string) error {
	if (signKey == "") != (signCert == "") {
		return exitcode.UsageError(errors.New("--sign-key and --sign-cert go together"))
	}
	if signKey == "" {
		return nil
	}
	var err error
	opts.Signer, opts.SignCert, err = uki.LoadSigner(signKey, signCert)
	return err
}
