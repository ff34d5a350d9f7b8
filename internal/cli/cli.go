// Package cli is what the project's command lines (builder, serverboot)
// share so that they behave as one family: how a command tree is run and
// its errors become exit codes (package exitcode), argument checks, the
// --json output shape and the confirmation of destructive commands.
package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// Execute runs root with args under a context cancelled by SIGINT/SIGTERM
// and returns the exit code. Errors are printed once, as "NAME: error";
// an interrupted command exits 130 and prints interrupted (if not empty)
// instead of the error.
func Execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer, interrupted string) int {
	Family(root)
	sigCtx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	root.SetArgs(args)
	err := root.ExecuteContext(sigCtx)
	if err == nil {
		return exitcode.OK
	}
	if sigCtx.Err() != nil && ctx.Err() == nil {
		if interrupted == "" {
			interrupted = "interrupted"
		}
		fmt.Fprintf(stderr, "%s: %s\n", root.Name(), interrupted)
		return exitcode.Interrupted
	}
	fmt.Fprintf(stderr, "%s: %v\n", root.Name(), err)
	return exitcode.Of(err)
}

// Family gives a command tree the family's conventions: errors and usage
// are printed by Execute, not cobra; flag errors are usage errors; a
// command group (a command with subcommands and nothing to run) refuses an
// unknown subcommand as a usage error instead of printing its help and
// succeeding; a command run with an old spelling of a flag (Alias) says
// on stderr to use the new one. Commands added later by other files are covered, since it
// walks the tree as it is when run.
func Family(root *cobra.Command) {
	root.SilenceUsage = true
	root.SilenceErrors = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitcode.UsageError(err) })
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.Args = unknownSubcommand
			c.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
		}
		if run := c.RunE; run != nil && c.Annotations[aliasOf] == "" {
			// Once, though Family may see the tree again.
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[aliasOf] = "noted"
			c.RunE = func(cmd *cobra.Command, args []string) error {
				noteAliases(cmd)
				return run(cmd, args)
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, ", ") + "?)"
	}
	return exitcode.UsageError(fmt.Errorf("%s; see '%s --help'", msg, cmd.CommandPath()))
}

// ExactArgs is cobra.ExactArgs as a usage error.
func ExactArgs(n int) cobra.PositionalArgs { return RangeArgs(n, n) }

// RangeArgs is cobra.RangeArgs as a usage error.
func RangeArgs(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || len(args) > max {
			want := fmt.Sprint(min)
			if max != min {
				want = fmt.Sprintf("%d to %d", min, max)
			}
			return exitcode.UsageError(fmt.Errorf("%s: want %s argument(s), got %d (see --help)", cmd.CommandPath(), want, len(args)))
		}
		return nil
	}
}

// JSONFlag adds the family's --json flag to c.
func JSONFlag(c *cobra.Command, v *bool) {
	c.Flags().BoolVar(v, "json", false, "print the result as JSON on stdout")
}

// WriteJSON writes v the way every --json does: one JSON value on stdout,
// indented by two spaces, newline-terminated. Progress, warnings and
// errors stay on stderr.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
