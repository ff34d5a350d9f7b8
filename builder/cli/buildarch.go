package cli

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/builder"
	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/osimage"
)

// planLanes prints each lane's plan: one plan as before, several one
// after another (--json: a list).
func planLanes(cmd *cobra.Command, stdout io.Writer, lanes []builder.Lane, asJSON bool) error {
	plans, err := builder.PlanBuild(cmd.Context(), lanes...)
	if errors.Is(err, builder.ErrOutputNotOurs) {
		return exitcode.UsageError(err)
	}
	if err != nil {
		return err
	}
	if asJSON {
		if len(plans) == 1 {
			return icli.WriteJSON(stdout, plans[0])
		}
		return icli.WriteJSON(stdout, plans)
	}
	for i, p := range plans {
		if len(plans) > 1 {
			fmt.Fprintf(stdout, "%s# %s\n", map[bool]string{true: "\n"}[i > 0], lanes[i].Recipe.Base.Architecture)
		}
		if err := p.WriteText(stdout); err != nil {
			return err
		}
	}
	return nil
}

// writeManifests prints what a build wrote: one manifest as before (a
// table, or the manifest with --json), several as one table with the
// architecture's directory in FILE (--json: a list of manifests).
func writeManifests(stdout io.Writer, ms []*osimage.BuildManifest, lanes []builder.Lane, asJSON bool) error {
	if asJSON {
		if len(ms) == 1 {
			return icli.WriteJSON(stdout, ms[0])
		}
		return icli.WriteJSON(stdout, ms)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tFILE\tSIZE\tSHA256")
	for i, m := range ms {
		for _, a := range m.Artifacts {
			path := a.Path
			if len(ms) > 1 {
				path = filepath.Join(filepath.Base(lanes[i].Options.OutputDir), a.Path)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", a.Kind, path, a.Size, a.SHA256)
		}
	}
	return tw.Flush()
}
