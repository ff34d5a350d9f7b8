package cli

import (
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/builder/sources"
	"github.com/ironcore-dev/os-builder/cache"
	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// importResult is what `cache import --json` prints.
type importResult struct {
	Image  string `json:"image"`
	Digest string `json:"digest"`
	Store  string `json:"store"`
}

// newCacheImport is `builder cache import`: air-gapped sites (and this
// project's CI, which reaches no public registry) bring images in by hand.
func newCacheImport(stdout io.Writer, cacheDir *string) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "import IMAGE-REF OCI-LAYOUT-DIR|OCI-ARCHIVE.tar",
		Short: "Import a pre-fetched image into the local OCI store for offline builds",
		Long: `Import copies an image (or multi-platform index) into the local OCI store
in the cache directory, where a recipe's oci source finds it without a
registry. IMAGE-REF must be pinned by digest, exactly as the layer names it;
the source must hold a manifest with that digest and every blob is checked
against its digest. Sources: an OCI image layout directory (crane pull
--format=oci, skopeo copy docker://REF oci:DIR), a tar archive of one
(skopeo copy docker://REF oci-archive:FILE), or a docker tarball whose
manifest digest still matches.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := name.NewDigest(args[0])
			if err != nil {
				return exitcode.UsageError(fmt.Errorf("%s: must be pinned by digest (NAME[:TAG]@sha256:...): %w", args[0], err))
			}
			dir := *cacheDir
			if dir == "" {
				dir = cache.DefaultDir()
			}
			st, err := sources.OpenOCIStore(sources.OCIStoreDir(dir))
			if err != nil {
				return err
			}
			d, err := st.Import(ref, args[1])
			if err != nil {
				return fmt.Errorf("import %s: %w", ref, err)
			}
			if asJSON {
				return icli.WriteJSON(stdout, importResult{Image: ref.String(), Digest: d.Digest.String(), Store: sources.OCIStoreDir(dir)})
			}
			_, err = fmt.Fprintf(stdout, "imported %s (%s) into %s\n", ref, d.Digest, sources.OCIStoreDir(dir))
			return err
		},
	}
	icli.JSONFlag(c, &asJSON)
	return c
}
