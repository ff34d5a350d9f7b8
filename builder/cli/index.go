package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/publish"
)

func init() {
	extraCommands = append(extraCommands, newIndex)
}

// newIndex is `builder index`: the last job of the pipeline joins the
// outputs each architecture's job built (and pulled back with `builder
// pull --arch`) into one index, with one SBOM and one provenance about it.
func newIndex(stdout, _ io.Writer) *cobra.Command {
	var opts publish.Options
	var asJSON bool
	var signKey, signCert string
	c := &cobra.Command{
		Use:   "index OUTPUT... REF",
		Short: "Publish the outputs of several architectures as one OCI image index",
		Long: `Index publishes the OUTPUT directories (one per architecture, each written
by 'builder build' or fetched by 'builder pull'; an OUTPUT of several
architectures stands for its OUTPUT/ARCH) as one image index under REF,
as 'builder push' publishes one: per architecture its manifests, then the SBOM
and SLSA provenance of all of them attached to the index (signed with
--sign-key). Blobs the registry has (pushed by each architecture's job) are
not uploaded again. Credentials come from the docker config, never from flags.`,
		Args: icli.RangeArgs(2, 16),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := loadPushSigner(&opts, signKey, signCert); err != nil {
				return err
			}
			dirs, ref := args[:len(args)-1], args[len(args)-1]
			if err := checkRef(ref, opts.Insecure); err != nil {
				return err
			}
			for _, d := range dirs {
				if _, err := publish.OutputDirs(d); err != nil {
					return exitcode.UsageError(err)
				}
			}
			h, err := publish.PushDirs(cmd.Context(), dirs, ref, opts)
			if err != nil {
				return err
			}
			if asJSON {
				return icli.WriteJSON(stdout, pushResult{Reference: ref, Digest: h.String(), Tags: opts.Tags})
			}
			_, err = fmt.Fprintln(stdout, h.String())
			return err
		},
	}
	f := c.Flags()
	icli.InsecureFlag(f, &opts.Insecure)
	f.StringSliceVar(&opts.Tags, "tag", nil, "extra tags to push")
	f.BoolVar(&opts.NoV2, "no-v2", false, noV2Usage)
	icli.JSONFlag(c, &asJSON)
	recipeFlag(f, &opts.Provenance.Recipe)
	f.StringVar(&opts.Provenance.Lock, "lock", "", "provenance: the recipe's lock file (its sha256 is recorded)")
	f.StringVar(&opts.Provenance.SourceRepo, "source-repo", "", "provenance: source repository URI, e.g. git+https://github.com/ORG/REPO")
	f.StringVar(&opts.Provenance.SourceCommit, "source-commit", "", "provenance: full git commit built")
	f.StringVar(&opts.Provenance.BuilderID, "builder-id", "", "provenance: who ran the build, e.g. a CI run URL (default "+publish.DefaultBuilderID+")")
	f.StringVar(&signKey, "sign-key", "", "sign the SBOM and provenance (DSSE) with this PEM key: the builds' --sign-key")
	f.StringVar(&signCert, "sign-cert", "", "PEM certificate for --sign-key")
	return c
}
