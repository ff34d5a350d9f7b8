// Package cli is the `builder` command line: a thin layer of flags over the
// recipe, builder, cache and publish packages.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/builder"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/recipe"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitFailed      = 1   // the build or a command failed
	ExitUsage       = 2   // bad flags or a bad recipe
	ExitInterrupted = 130 // SIGINT/SIGTERM
)

// usageError marks errors that are the caller's input, not the build.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// Main runs the CLI with args and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return ExitOK
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "builder: interrupted; nothing was written in place of the previous output")
		return ExitInterrupted
	}
	fmt.Fprintf(stderr, "builder: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitFailed
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "builder",
		Short:         "Build IronCore OS images from declarative recipes",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
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
		return nil, usageError{err}
	}
	if len(exclude) > 0 {
		if err := r.ExcludeLayers(exclude...); err != nil {
			return nil, usageError{err}
		}
	}
	return r, nil
}

func newBuild(stdout, stderr io.Writer) *cobra.Command {
	var opts builder.Options
	var exclude []string
	var asJSON bool
	c := &cobra.Command{
		Use:   "build RECIPE",
		Short: "Build a recipe's artifacts into an output directory",
		Long: `Build runs the recipe's steps (bootstrap, sources, assemble, initrd,
artifacts), reusing cached step outputs whose inputs are unchanged, and
swaps the finished output directory into place in one rename.

The output directory must be new, empty or an earlier output of this
builder (its manifest.json lists every file in it); anything else is
refused before the build starts, because the swap deletes what it held.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := loadRecipe(args[0], exclude)
			if err != nil {
				return err
			}
			opts.Progress = stderr
			m, err := builder.Build(cmd.Context(), r, opts)
			if errors.Is(err, builder.ErrOutputNotOurs) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(stdout).Encode(m)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tFILE\tSIZE\tSHA256")
			for _, a := range m.Artifacts {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", a.Kind, a.Path, a.Size, a.SHA256)
			}
			return tw.Flush()
		},
	}
	f := c.Flags()
	f.StringVarP(&opts.OutputDir, "output", "o", "", "output directory: new, empty or an earlier output (default out/<recipe name>)")
	f.StringVar(&opts.CacheDir, "cache-dir", "", "cache directory (default $OSB_CACHE_DIR or ~/.cache/os-builder)")
	f.BoolVar(&opts.NoCache, "no-cache", false, "run every step; neither read nor fill the cache")
	f.BoolVarP(&opts.Verbose, "explain", "v", false, "say why each step missed the cache")
	f.StringSliceVar(&exclude, "exclude-layer", nil, "leave a layer out (recorded in the manifest)")
	f.BoolVar(&asJSON, "json", false, "print the build manifest as JSON")
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

func newCache(stdout io.Writer) *cobra.Command {
	var dir string
	c := &cobra.Command{Use: "cache", Short: "List, prune or import build cache entries"}
	c.PersistentFlags().StringVar(&dir, "cache-dir", "", "cache directory (default $OSB_CACHE_DIR or ~/.cache/os-builder)")
	open := func() (*cache.Store, error) {
		if dir == "" {
			dir = builder.DefaultCacheDir()
		}
		return cache.Open(dir)
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List cache entries, newest first",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := open()
			if err != nil {
				return err
			}
			entries, err := s.List()
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(stdout).Encode(entries)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tSTEP\tSIZE\tCREATED")
			for _, e := range entries {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Key[:12], e.Step, humanBytes(e.Size), e.Created.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	var olderThan time.Duration
	prune := &cobra.Command{
		Use:   "prune",
		Short: "Remove cache entries (all, or those unused for --older-than)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := open()
			if err != nil {
				return err
			}
			freed, err := s.Prune(olderThan)
			debs, derr := builder.PruneDebs(dir, olderThan)
			fmt.Fprintf(stdout, "freed %s\n", humanBytes(freed+debs))
			return errors.Join(err, derr)
		},
	}
	prune.Flags().DurationVar(&olderThan, "older-than", 0, "only entries unused for this long (e.g. 168h)")
	c.AddCommand(ls, prune, newCacheImport(stdout, &dir))
	return c
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s: want %d argument(s), got %d (see --help)", cmd.CommandPath(), n, len(args))}
		}
		return nil
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
