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
	"github.com/ironcore-dev/os-builder/recipe"
)

// planArchitectures prints each architecture's plan: one plan as before,
// several one after another (--json: a list).
func planArchitectures(cmd *cobra.Command, stdout io.Writer, rs []*recipe.Recipe, runOpts []builder.Options, asJSON bool) error {
	var plans []*builder.Plan
	for i, r := range rs {
		p, err := builder.PlanBuild(cmd.Context(), r, runOpts[i])
		if errors.Is(err, builder.ErrOutputNotOurs) {
			return exitcode.UsageError(err)
		}
		if err != nil {
			return err
		}
		plans = append(plans, p)
	}
	if asJSON {
		if len(plans) == 1 {
			return icli.WriteJSON(stdout, plans[0])
		}
		return icli.WriteJSON(stdout, plans)
	}
	for i, p := range plans {
		if len(plans) > 1 {
			fmt.Fprintf(stdout, "%s# %s\n", map[bool]string{true: "\n"}[i > 0], rs[i].Base.Architecture)
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
func writeManifests(stdout io.Writer, ms []*osimage.BuildManifest, runOpts []builder.Options, asJSON bool) error {
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
				path = filepath.Join(filepath.Base(runOpts[i].OutputDir), a.Path)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", a.Kind, path, a.Size, a.SHA256)
		}
	}
	return tw.Flush()
}
