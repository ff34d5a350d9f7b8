package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/builder/sources"
	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/recipe"
)

func init() {
	extraCommands = append(extraCommands, newLock)
}

// lockUsage marks a --locked build refused for its lock as bad input.
func lockUsage(err error) error {
	var le *sources.LockError
	if errors.As(err, &le) {
		return exitcode.UsageError(err)
	}
	return err
}

func newLock(stdout, stderr io.Writer) *cobra.Command {
	var update, asJSON bool
	var exclude []string
	c := &cobra.Command{
		Use:   "lock RECIPE [--update [LAYER...]]",
		Short: "Pin every source of a recipe to a digest in its lock file (RECIPE.lock)",
		Long: `Lock resolves every source of the recipe's layers to a digest and writes
them to the lock file next to the recipe (recipes/x.yaml -> recipes/x.lock):
OCI images by tag to their manifest or index digest (through
OSB_REGISTRY_MIRRORS, as builds pull), Go modules to their go.sum hash
(go mod download: checked by the checksum database as GOSUMDB/GONOSUMDB say).
A digest written in the layer file wins and is copied.

Existing entries are kept; only sources without one are resolved, and
entries for sources the recipe no longer has are dropped. --update resolves
again the sources of the named layers, or of every layer.

Layers left out with --exclude-layer (or the recipe's exclude:) are not
resolved: their existing entries are kept, none are added. Any other source
that cannot be resolved fails the command and nothing is written.`,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) < 1:
				return exitcode.UsageError(fmt.Errorf("%s: want RECIPE (see --help)", cmd.CommandPath()))
			case len(args) > 1 && !update:
				return exitcode.UsageError(fmt.Errorf("%s: LAYER arguments go with --update (see --help)", cmd.CommandPath()))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := loadRecipe(args[0], exclude)
			if err != nil {
				return err
			}
			layers := args[1:]
			for _, l := range layers {
				switch {
				case slices.Contains(r.Exclude, l):
					return exitcode.UsageError(fmt.Errorf("--update %s: the layer is excluded", l))
				case !slices.Contains(r.LayerNames(), l):
					return exitcode.UsageError(fmt.Errorf("--update %s: no layer of that name (layers: %s)", l, strings.Join(r.LayerNames(), ", ")))
				}
			}
			path := recipe.LockPath(r.Path)
			old, err := recipe.LoadLock(path)
			if errors.Is(err, fs.ErrNotExist) {
				old = nil
			} else if err != nil {
				return exitcode.UsageError(err)
			}
			next, changes, err := sources.UpdateLock(cmd.Context(), r, old, sources.LockOptions{Update: update, Layers: layers})
			if err != nil {
				return err
			}
			if err := next.Write(); err != nil {
				return err
			}
			for _, l := range r.Exclude {
				fmt.Fprintf(stderr, "builder: layer %s excluded: its sources are not resolved\n", l)
			}
			if asJSON {
				type change struct {
					What      string              `json:"what"`
					Source    recipe.LockedSource `json:"source"`
					OldDigest string              `json:"oldDigest,omitempty"`
				}
				res := struct {
					Lock    string                `json:"lock"`
					Sources []recipe.LockedSource `json:"sources"`
					Changes []change              `json:"changes"`
				}{Lock: recipe.DisplayPath(path), Sources: next.Sources, Changes: []change{}}
				for _, ch := range changes {
					res.Changes = append(res.Changes, change{ch.What, ch.Source, ch.OldDigest})
				}
				return icli.WriteJSON(stdout, res)
			}
			for _, ch := range changes {
				s := ch.Source
				fmt.Fprintf(stdout, "%-8s %s %s %s %s", ch.What, s.Layer, s.Kind, s.Ref, s.Digest)
				if ch.What == "updated" {
					fmt.Fprintf(stdout, " (was %s)", ch.OldDigest)
				}
				fmt.Fprintln(stdout)
			}
			fmt.Fprintf(stdout, "%s: %d source(s), %d change(s)\n", recipe.DisplayPath(path), len(next.Sources), len(changes))
			return nil
		},
	}
	c.Flags().BoolVar(&update, "update", false, "resolve again the sources of the LAYER arguments, or of every layer")
	icli.JSONFlag(c, &asJSON)
	c.Flags().StringSliceVar(&exclude, "exclude-layer", nil, "leave a layer's sources unresolved (existing entries are kept)")
	return c
}
