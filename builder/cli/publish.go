package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/publish"
	"github.com/ironcore-dev/os-builder/uki"
)

func init() {
	extraCommands = append(extraCommands, newPush, newInspect, newGenkey)
}

func newPush(stdout, _ io.Writer) *cobra.Command {
	var opts publish.Options
	c := &cobra.Command{
		Use:   "push OUTPUT [REF]",
		Short: "Publish a build output as an OCI image index (default: the OCI layout out/oci)",
		Long: `Push publishes OUTPUT (a directory written by 'builder build') with its
boot identity. REF is a registry reference (registry/repo:tag) or oci:PATH[:TAG]
for a local OCI layout; without REF it goes to oci:out/oci:<version>.
Credentials come from the docker config and the environment, never from flags.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageError{fmt.Errorf("push: want OUTPUT [REF]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ref := ""
			if len(args) == 2 {
				ref = args[1]
			}
			h, err := publish.Push(cmd.Context(), args[0], ref, opts)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, h.String())
			return nil
		},
	}
	c.Flags().BoolVar(&opts.Insecure, "insecure", false, "allow plain HTTP registries")
	c.Flags().StringSliceVar(&opts.Tags, "tag", nil, "extra tags to push")
	// Recorded in the provenance attached to registry pushes.
	c.Flags().StringVar(&opts.Provenance.Recipe, "recipe", "", "provenance: the recipe file built (its sha256 is recorded)")
	c.Flags().StringVar(&opts.Provenance.Lock, "lock", "", "provenance: the recipe's lock file (its sha256 is recorded)")
	c.Flags().StringVar(&opts.Provenance.SourceRepo, "source-repo", "", "provenance: source repository URI, e.g. git+https://github.com/ORG/REPO")
	c.Flags().StringVar(&opts.Provenance.SourceCommit, "source-commit", "", "provenance: full git commit built")
	c.Flags().StringVar(&opts.Provenance.BuilderID, "builder-id", "", "provenance: who ran the build, e.g. a CI run URL (default "+publish.DefaultBuilderID+")")
	return c
}

func newInspect(stdout, _ io.Writer) *cobra.Command {
	var opts publish.Options
	var asJSON bool
	var verify []string
	c := &cobra.Command{
		Use:   "inspect REF",
		Short: "Print an image's artifacts, boot identity and referrers (SBOM, provenance)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
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
	c.Flags().BoolVar(&opts.Insecure, "insecure", false, "allow plain HTTP registries")
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().StringSliceVar(&verify, "verify", nil, "fail unless REF is exactly what 'builder push' makes of these output directories, with SBOM and provenance attached")
	return c
}

func newGenkey(stdout, _ io.Writer) *cobra.Command {
	var cn string
	c := &cobra.Command{
		Use:   "genkey DIR",
		Short: "Make a Secure Boot signing key pair (db.key, db.crt) for tests and labs",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := uki.GenerateKey(args[0], cn); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "wrote %s/%s and %s/%s\n", args[0], uki.KeyFile, args[0], uki.CertFile)
			return nil
		},
	}
	c.Flags().StringVar(&cn, "common-name", "os-builder test signing key", "certificate subject CN")
	return c
}
