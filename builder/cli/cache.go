package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/remotecache"
	"github.com/ironcore-dev/os-builder/builder/rootfs"
	"github.com/ironcore-dev/os-builder/cache"
	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// defaultCacheDir is the one description of the default cache directory
// (cache.DefaultDir); README.md, the Makefile and --help say it.
const defaultCacheDir = "$OSB_CACHE_DIR, else $XDG_CACHE_HOME/os-builder, else ~/.cache/os-builder"

const cacheDirUsage = "cache directory (default " + defaultCacheDir + ")"

func cacheDirFlag(f *pflag.FlagSet, dir *string) {
	f.StringVar(dir, "cache-dir", "", cacheDirUsage)
}

// stdin is where destructive commands read their confirmation; a variable
// so that tests can hand in a terminal.
var stdin = os.Stdin

func newCache(stdout io.Writer) *cobra.Command {
	var dir string
	c := &cobra.Command{Use: "cache", Short: "List, prune, import, push or pull build cache entries"}
	cacheDirFlag(c.PersistentFlags(), &dir)
	open := func() (*cache.Store, error) {
		if dir == "" {
			dir = cache.DefaultDir()
		}
		return cache.Open(dir)
	}
	var lsJSON bool
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
			if lsJSON {
				if entries == nil {
					entries = []cache.Entry{}
				}
				return icli.WriteJSON(stdout, entries)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KEY\tSTEP\tSIZE\tCREATED")
			for _, e := range entries {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Key[:12], e.Step, progress.HumanSize(e.Size), e.Created.Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	icli.JSONFlag(ls, &lsJSON)
	c.AddCommand(ls, newCachePrune(stdout, open, &dir), newCacheImport(stdout, &dir),
		newCacheTransfer(stdout, open, false), newCacheTransfer(stdout, open, true))
	return c
}

// pruneResult is what `cache prune --json` prints.
type pruneResult struct {
	Dir        string `json:"dir"`
	FreedBytes int64  `json:"freedBytes"`
}

// newCachePrune is `builder cache prune`: deleting the whole cache costs
// hours of rebuilds, so doing it needs --all or a yes on a terminal.
func newCachePrune(stdout io.Writer, open func() (*cache.Store, error), dir *string) *cobra.Command {
	var olderThan time.Duration
	var all, asJSON bool
	var remoteRepo string
	var access remotecache.Access
	c := &cobra.Command{
		Use:   "prune --all | --older-than DURATION | --remote REPOSITORY --older-than DURATION [RECIPE...]",
		Short: "Remove cache entries: all (--all) or those unused for --older-than",
		Long: `Prune removes cache entries that no build is filling right now: with
--older-than, those unused for that long; with --all, every one. Without
either it asks on a terminal and refuses (exit 2) elsewhere.

With --remote it deletes the entries of a registry repository pushed more
than --older-than ago that no lock file references any more: the plan of
each RECIPE (default: every recipes/NAME.yaml with a recipes/NAME.lock),
made against its lock and the local cache, names the entries kept. The
registry must allow deletes (docker-registry:
REGISTRY_STORAGE_DELETE_ENABLED=true); prune says so when it does not.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if remoteRepo == "" {
				return exactArgs(0)(cmd, args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if remoteRepo != "" {
				if all || olderThan <= 0 {
					return exitcode.UsageError(errors.New("--remote needs --older-than DURATION (and no --all)"))
				}
				if *dir == "" {
					*dir = cache.DefaultDir()
				}
				return pruneRemote(cmd, stdout, remoteRepo, olderThan, args, *dir, access, asJSON)
			}
			switch {
			case olderThan < 0:
				return exitcode.UsageError(fmt.Errorf("--older-than %s is negative", olderThan))
			case all && olderThan > 0:
				return exitcode.UsageError(errors.New("--all and --older-than exclude each other"))
			}
			s, err := open()
			if err != nil {
				return err
			}
			if !all && olderThan == 0 {
				entries, err := s.List()
				if err != nil {
					return err
				}
				var size int64
				for _, e := range entries {
					size += e.Size
				}
				q := fmt.Sprintf("remove every entry of the cache %s (%d entries, %s)?", *dir, len(entries), progress.HumanSize(size))
				if err := icli.Confirm(stdin, cmd.ErrOrStderr(), q, "--all (or --older-than DURATION)"); err != nil {
					return err
				}
			}
			freed, err := s.Prune(olderThan)
			if err != nil {
				return err
			}
			// The .debs kept between bootstraps go the same way.
			debs, err := rootfs.PruneDebs(*dir, olderThan)
			if err != nil {
				return err
			}
			freed += debs
			if asJSON {
				return icli.WriteJSON(stdout, pruneResult{Dir: *dir, FreedBytes: freed})
			}
			_, err = fmt.Fprintf(stdout, "freed %s\n", progress.HumanSize(freed))
			return err
		},
	}
	icli.DurationFlag(c.Flags(), &olderThan, "older-than", 0, "only entries unused for this long (e.g. 168h)")
	c.Flags().BoolVar(&all, "all", false, "every entry, without asking")
	c.Flags().StringVar(&remoteRepo, "remote", "", "prune this registry repository of cache entries instead (see above)")
	cacheInsecureFlag(c.Flags(), &access)
	icli.JSONFlag(c, &asJSON)
	return c
}
