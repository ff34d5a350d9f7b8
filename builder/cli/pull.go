package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/publish"
)

func init() {
	extraCommands = append(extraCommands, newPull)
}

// newPull is `builder pull`: the artifacts of a published image back into
// a directory, checked against the layer digests and manifest.json.
func newPull(stdout, stderr io.Writer) *cobra.Command {
	var opts publish.Options
	var asJSON bool
	c := &cobra.Command{
		Use:   "pull REF DIR",
		Short: "Fetch an image's artifacts into a new or empty directory, verified",
		Long: `Pull writes each artifact layer of REF (registry/repo:tag, @sha256:...,
or oci:PATH[:TAG]) under its title into DIR, which must be new or empty.
Every file is checked against its layer digest while it is written, then
against the image's manifest.json. An index with several architectures
needs --arch. Of an index with v1 and IronCore Image V2 manifests the v1
one is pulled unless --kind names a V2 kind.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkRef(args[0], opts.Insecure); err != nil {
				return err
			}
			dir := args[1]
			switch des, err := os.ReadDir(dir); {
			case errors.Is(err, os.ErrNotExist):
			case err != nil:
				return exitcode.UsageError(fmt.Errorf("pull: %w", err))
			case len(des) > 0:
				return exitcode.UsageError(fmt.Errorf("pull: %s holds %q: want a new or empty directory", dir, des[0].Name()))
			}
			m, err := publish.Pull(cmd.Context(), args[0], dir, opts)
			if err != nil {
				return err
			}
			if asJSON {
				return icli.WriteJSON(stdout, m) // null without manifest.json
			}
			if m == nil {
				fmt.Fprintf(stderr, "%s carries no manifest.json: the files in %s are checked against their layer digests only\n", args[0], dir)
				return nil
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tFILE\tSIZE\tSHA256")
			for _, a := range m.Artifacts {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", a.Kind, a.Path, a.Size, a.SHA256)
			}
			return tw.Flush()
		},
	}
	icli.InsecureFlag(c.Flags(), &opts.Insecure)
	c.Flags().StringVar(&opts.Arch, "arch", "", "architecture to pull from a multi-architecture index (amd64, arm64)")
	c.Flags().StringVar(&opts.Kind, "kind", "", "manifest to pull: v1, or an IronCore Image V2 kind (UKI, EFI, Disk); default v1 where there is one, else every V2 kind")
	icli.JSONFlag(c, &asJSON)
	return c
}

// checkRef refuses a malformed REF before any request, as a usage error
// (exit 2): a registry reference by the family's parser (serverboot's
// --image too), oci:PATH[:TAG] by publish's.
func checkRef(ref string, insecure bool) error {
	if strings.HasPrefix(ref, publish.LayoutPrefix) {
		if _, err := publish.ParseTarget(ref, publish.Options{}); err != nil {
			return exitcode.UsageError(err)
		}
		return nil
	}
	_, err := icli.ParseReference("REF", ref, insecure)
	return err
}
