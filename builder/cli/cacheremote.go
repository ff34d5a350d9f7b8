package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ironcore-dev/os-builder/builder"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/remotecache"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/cache/remote"
	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
	"github.com/ironcore-dev/os-builder/recipe"
)

// cacheRepoEnv names the repository both --cache-from and --cache-to
// default to.
const cacheRepoEnv = "OSB_CACHE_REPO"

// remoteCacheFlags are build's --cache-from and --cache-to, and how they
// are spoken to (cachetrust.go). Credentials are never a flag: they come
// from the Docker config and its helpers.
func remoteCacheFlags(f *pflag.FlagSet, from, to *string, a *remotecache.Access) {
	repo := os.Getenv(cacheRepoEnv)
	f.StringVar(from, "cache-from", repo, "registry repository of cache entries to pull steps missing locally from (default $"+cacheRepoEnv+"; credentials from the Docker config)")
	f.StringVar(to, "cache-to", repo, "registry repository to push the build's cache entries to, signed, in the background (default $"+cacheRepoEnv+")")
	cacheSignFlags(f, a)
	cacheTrustFlags(f, a)
	cacheInsecureFlag(f, a)
}

// transferResult is what `cache push|pull --json` prints.
type transferResult struct {
	Repository string `json:"repository"`
	Entries    int    `json:"entries"`
	Skipped    int    `json:"skipped"`
	Bytes      int64  `json:"bytes"`
	// Untrusted are the entries pull skipped: not signed by a trusted key.
	Untrusted int `json:"untrusted,omitempty"`
}

// newCacheTransfer is `builder cache push REF` and `builder cache pull
// REF`: a whole local cache (or one recipe's steps) to or from a
// repository, for sites without a registry the builders share.
func newCacheTransfer(stdout io.Writer, open func() (*cache.Store, error), pull bool) *cobra.Command {
	var recipeFile string
	var asJSON bool
	var access remotecache.Access
	verb, short := "push", "Push local cache entries to a registry repository"
	if pull {
		verb, short = "pull", "Pull cache entries from a registry repository into the local cache"
	}
	c := &cobra.Command{
		Use:   verb + " REPOSITORY",
		Short: short,
		Long: short + ` (docs/build-graph.md, "Remote cache"): every
entry, or with --recipe those of that recipe's steps (push: the entries its
last build used; pull: the entries pushed by a build of it). Entries the
other side has are skipped; pulled entries are checked blob by blob and
sealed anew. Pushed entries are signed (--cache-sign-key); pulled ones
are taken only when signed by a --cache-trust certificate's key, the
others are skipped and counted. Credentials come from the Docker config
and its helpers.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := access.PushOptions
			if pull {
				opts = access.PullOptions
			}
			ro, err := opts()
			if err != nil {
				return exitcode.UsageError(err)
			}
			repo, err := remote.Open(args[0], ro...)
			if err != nil {
				return exitcode.UsageError(err)
			}
			recipeName, err := recipeNameOf(cmd.ErrOrStderr(), recipeFile)
			if err != nil {
				return err
			}
			s, err := open()
			if err != nil {
				return err
			}
			res := transferResult{Repository: repo.String()}
			if pull {
				err = pullAll(cmd.Context(), repo, s, recipeName, &res)
			} else {
				err = pushAll(cmd.Context(), repo, s, recipeName, &res)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return icli.WriteJSON(stdout, res)
			}
			untrusted := ""
			if res.Untrusted > 0 {
				untrusted = fmt.Sprintf(", %d skipped: not signed by a trusted key", res.Untrusted)
			}
			_, err = fmt.Fprintf(stdout, "%sed %d entries (%s), %d already there%s\n", verb, res.Entries, progress.HumanSize(res.Bytes), res.Skipped, untrusted)
			return err
		},
	}
	recipeFlag(c.Flags(), &recipeFile)
	if pull {
		cacheTrustFlags(c.Flags(), &access)
	} else {
		cacheSignFlags(c.Flags(), &access)
	}
	cacheInsecureFlag(c.Flags(), &access)
	icli.JSONFlag(c, &asJSON)
	return c
}

// recipeFlag is --recipe: a recipe file, on every command that takes one.
func recipeFlag(f *pflag.FlagSet, v *string) {
	f.StringVar(v, "recipe", "", "the recipe file built (push, index: provenance records its sha256; cache push/pull: only its steps' entries)")
}

// recipeNameOf is the name of the recipe --recipe names. --recipe was a
// recipe's name on cache push/pull; a value that is no file but a plain
// name still means that recipe, with a note (scripts keep working).
func recipeNameOf(stderr io.Writer, file string) (string, error) {
	if file == "" {
		return "", nil
	}
	if _, err := os.Stat(file); err != nil && errors.Is(err, os.ErrNotExist) && !strings.ContainsRune(file, filepath.Separator) && filepath.Ext(file) == "" {
		fmt.Fprintf(stderr, "note: --recipe %s: no such file, taken as a recipe name (deprecated: give the recipe file)\n", file)
		return file, nil
	}
	r, err := loadRecipe(file, nil)
	if err != nil {
		return "", err
	}
	return r.Name, nil
}

func pushAll(ctx context.Context, repo *remote.Repo, s *cache.Store, recipeName string, res *transferResult) error {
	var keys []string
	recipes := map[string]string{}
	if recipeName != "" {
		// A build of several architectures records each under
		// NAME/ARCH (builder's cachedRunner scope).
		for _, scope := range append([]string{recipeName}, archScopes(recipeName)...) {
			k, err := s.ScopeKeys(scope)
			if err != nil {
				return err
			}
			keys = append(keys, k...)
		}
		if len(keys) == 0 {
			return fmt.Errorf("no build of recipe %q recorded in %s", recipeName, s.Dir)
		}
		for _, k := range keys {
			recipes[k] = recipeName
		}
	} else {
		entries, err := s.List()
		if err != nil {
			return err
		}
		for _, e := range entries {
			keys = append(keys, e.Key)
		}
	}
	for _, k := range keys {
		if _, ok := s.Lookup(k); !ok {
			continue // a recorded step whose entry was pruned
		}
		n, pushed, err := repo.Push(ctx, s, k, recipes[k])
		if err != nil {
			return fmt.Errorf("push %.12s: %w", k, err)
		}
		if pushed {
			res.Entries++
			res.Bytes += n
		} else {
			res.Skipped++
		}
	}
	return nil
}

func pullAll(ctx context.Context, repo *remote.Repo, s *cache.Store, recipeName string, res *transferResult) error {
	keys, err := repo.Keys(ctx)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if _, ok := s.Lookup(k); ok {
			res.Skipped++
			continue
		}
		if recipeName != "" {
			info, err := repo.Stat(ctx, k)
			if err != nil {
				return err
			}
			if info.Recipe != recipeName {
				continue
			}
		}
		_, n, err := repo.Pull(ctx, s, k)
		if errors.Is(err, remote.ErrUntrusted) {
			res.Untrusted++
			continue
		}
		if err != nil {
			return fmt.Errorf("pull %.12s: %w", k, err)
		}
		res.Entries++
		res.Bytes += n
	}
	return nil
}

// remotePruneResult is what `cache prune --remote --json` prints.
type remotePruneResult struct {
	Repository string   `json:"repository"`
	Deleted    []string `json:"deleted"`
	Kept       int      `json:"kept"`
}

// pruneRemote deletes the entries of repo older than olderThan that no
// recipe's plan names: each recipe is planned against its lock (--locked)
// and the local cache, so every step key its locked build uses is known;
// a plan with a step whose key needs an output the local cache lacks
// cannot say what it references, and prune refuses.
func pruneRemote(cmd *cobra.Command, stdout io.Writer, ref string, olderThan time.Duration, recipes []string, cacheDir string, access remotecache.Access, asJSON bool) error {
	repo, err := remote.Open(ref, access.NetOptions()...)
	if err != nil {
		return exitcode.UsageError(err)
	}
	ctx := cmd.Context()
	if len(recipes) == 0 {
		locks, err := filepath.Glob("recipes/*.lock")
		if err != nil {
			return err
		}
		for _, l := range locks {
			recipes = append(recipes, strings.TrimSuffix(l, ".lock")+".yaml")
		}
		if len(recipes) == 0 {
			return exitcode.UsageError(errors.New("no recipes/*.lock here: name the recipes whose lock files keep entries"))
		}
	}
	referenced := map[string]bool{}
	for _, path := range recipes {
		r, err := loadRecipe(path, nil)
		if err != nil {
			return err
		}
		lanes, err := builder.Lanes(r, nil, builder.Options{CacheDir: cacheDir, Locked: true, Init: Init, OutputDir: filepath.Join(os.TempDir(), "osb-prune-plan")})
		if err != nil {
			return err
		}
		for _, l := range lanes {
			arch := l.Recipe.Base.Architecture
			plans, err := builder.PlanBuild(ctx, l)
			if err != nil {
				return fmt.Errorf("plan %s (%s): %w", path, arch, err)
			}
			p := plans[0]
			for _, st := range p.Steps {
				if st.Cache == "pending" {
					return fmt.Errorf("plan %s (%s): step %s: its key needs outputs the local cache does not have; build (or `cache pull`) the recipe for %s first, so prune knows every entry its lock references", path, arch, st.Step, arch)
				}
				if st.Key != "" {
					referenced[st.Key] = true
				}
			}
		}
	}
	keys, err := repo.Keys(ctx)
	if err != nil {
		return err
	}
	res := remotePruneResult{Repository: repo.String(), Deleted: []string{}}
	for _, k := range keys {
		if referenced[k] {
			res.Kept++
			continue
		}
		info, err := repo.Stat(ctx, k)
		if err != nil {
			return err
		}
		if time.Since(info.Pushed) < olderThan {
			res.Kept++
			continue
		}
		if err := repo.Delete(ctx, info); err != nil {
			return err
		}
		res.Deleted = append(res.Deleted, k)
	}
	if asJSON {
		return icli.WriteJSON(stdout, res)
	}
	_, err = fmt.Fprintf(stdout, "deleted %d entries from %s, kept %d\n", len(res.Deleted), res.Repository, res.Kept)
	return err
}

// archScopes are the scopes a build of several architectures records a
// recipe's steps under.
func archScopes(name string) []string {
	var out []string
	for _, a := range recipe.Architectures {
		out = append(out, name+"/"+a)
	}
	return out
}
