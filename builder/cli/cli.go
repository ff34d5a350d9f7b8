// Package cli is the `builder` command line: a thin layer of flags over the
// recipe, builder, cache and publish packages.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/builder"
	"github.com/ironcore-dev/os-builder/builder/progress"
	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/recipe"
)

// Exit codes: the family's table (internal/exitcode, README "Exit codes").
const (
	ExitOK          = exitcode.OK
	ExitFailed      = exitcode.Failed
	ExitUsage       = exitcode.Usage
	ExitInterrupted = exitcode.Interrupted
)

// Main runs the CLI with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return icli.Execute(context.Background(), newRoot(stdout, stderr), args, stderr,
		"interrupted; nothing was written in place of the previous output")
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "builder",
		Short: "Build IronCore OS images from declarative recipes",
		Long: "Build IronCore OS images from declarative recipes.\n\nStep outputs are cached in " + defaultCacheDir +
			"; the Makefile uses the same.\n\n" + exitcode.Help(),
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newBuild(stdout, stderr), newRender(stdout), newCache(stdout))
	for _, c := range extraCommands {
		root.AddCommand(c(stdout, stderr))
	}
	return root
}

// extraCommands lets other files of this package register commands.
var extraCommands []func(stdout, stderr io.Writer) *cobra.Command

func loadRecipe(path string, exclude []string) (*recipe.Recipe, error) {
	r, err := recipe.Load(path)
	if err != nil {
		return nil, exitcode.UsageError(err)
	}
	if len(exclude) > 0 {
		if err := r.ExcludeLayers(exclude...); err != nil {
			return nil, exitcode.UsageError(err)
		}
	}
	return r, nil
}

func newBuild(stdout, stderr io.Writer) *cobra.Command {
	var opts builder.Options
	var exclude, archs []string
	var asJSON, plan bool
	c := &cobra.Command{
		Use:   "build RECIPE",
		Short: "Build a recipe's artifacts into an output directory",
		Long: `Build runs the recipe's steps as a graph (bootstrap, go and oci sources,
init, assemble, initrds, then the artifact writers), independent steps at
once within --jobs, reusing cached step outputs whose inputs are
unchanged, and swaps the finished output directory into place in one
rename. When the output directory already holds this build's output
(same input key, artifacts unchanged) it writes nothing. --plan prints
the graph, each step's cache key and hit or miss, and runs nothing.

The output directory must be new, empty or an earlier output of this
builder (its manifest.json lists every file in it); anything else is
refused before the build starts, because the swap deletes what it held.

A recipe with base.architectures builds every architecture it names in
one graph, each into --output/ARCH (--json: a list of manifests); --arch
picks some of them (one: into --output itself).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := loadRecipe(args[0], exclude)
			if err != nil {
				return err
			}
			if opts.Jobs < 0 {
				return exitcode.UsageError(fmt.Errorf("--jobs %d: want 1 or more (0: one per core)", opts.Jobs))
			}
			// The plan keys the init step as the build does: by the init
			// this builder carries, when it carries one.
			opts.Init = Init
			lanes, err := builder.Lanes(r, archs, opts)
			if err != nil {
				return exitcode.UsageError(err)
			}
			if plan {
				return planLanes(cmd, stdout, lanes, asJSON)
			}
			if !opts.NoCache {
				if err := checkCacheAccess(opts.CacheFrom, opts.CacheTo, opts.CacheAccess); err != nil {
					return err
				}
			}
			for i := range lanes {
				lanes[i].Options.Progress = stderr
				if asJSON {
					lanes[i].Options.ProgressMode = progress.ModeJSON
				}
			}
			ms, err := builder.Build(cmd.Context(), lanes...)
			if errors.Is(err, builder.ErrOutputNotOurs) {
				return exitcode.UsageError(err)
			}
			if err != nil {
				return lockUsage(err)
			}
			return writeManifests(stdout, ms, lanes, asJSON)
		},
	}
	f := c.Flags()
	f.StringVarP(&opts.OutputDir, "output", "o", "", "output directory: new, empty or an earlier output (default out/<recipe name>)")
	cacheDirFlag(f, &opts.CacheDir)
	f.BoolVar(&opts.NoCache, "no-cache", false, "run every step; neither read nor fill the cache")
	remoteCacheFlags(f, &opts.CacheFrom, &opts.CacheTo, &opts.CacheAccess)
	f.BoolVarP(&opts.Verbose, "explain", "v", false, "say why each step missed the cache")
	f.StringSliceVar(&exclude, "exclude-layer", nil, "leave a layer out (recorded in the manifest)")
	f.BoolVar(&opts.Locked, "locked", false, "build only sources the recipe's lock file pins; refuse (exit 2) if it is stale")
	f.BoolVar(&asJSON, "json", false, "progress as JSON lines on stderr, the manifest (or --plan) as JSON on stdout")
	f.StringSliceVar(&archs, "arch", nil, "build these of the recipe's architectures (amd64, arm64; default: every one it names; one: into --output itself)")
	f.BoolVar(&plan, "plan", false, "print the step graph with cache keys and hits; build nothing")
	f.IntVarP(&opts.Jobs, "jobs", "j", 0, "steps at once (a Go build or a squashfs write counts as one or more; default: one per core)")
	f.BoolVar(&opts.Verify, "verify", false, "hash every artifact to decide that nothing changed (default: compare size, inode and change time)")
	f.StringVar(&opts.SignKey, "sign-key", "", "PEM private key to sign UKIs for Secure Boot (see 'builder genkey')")
	f.StringVar(&opts.SignCert, "sign-cert", "", "PEM certificate for --sign-key")
	return c
}

func newRender(stdout io.Writer) *cobra.Command {
	var asJSON bool
	var exclude []string
	c := &cobra.Command{
		Use:   "render RECIPE",
		Short: "Print the fully resolved recipe: layers inlined, defaults applied",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := loadRecipe(args[0], exclude)
			if err != nil {
				return err
			}
			format := "yaml"
			if asJSON {
				format = "json"
			}
			b, err := recipe.Render(r, format)
			if err != nil {
				return err
			}
			_, err = stdout.Write(b)
			return err
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of YAML")
	c.Flags().StringSliceVar(&exclude, "exclude-layer", nil, "leave a layer out")
	return c
}

func exactArgs(n int) cobra.PositionalArgs { return icli.ExactArgs(n) }

// Command returns the builder command tree, for tests and documentation
// checks that walk it; Main runs it.
func Command(stdout, stderr io.Writer) *cobra.Command { return newRoot(stdout, stderr) }
