package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/ironcore-dev/os-builder/builder/remotecache"
	icli "github.com/ironcore-dev/os-builder/internal/cli"
	"github.com/ironcore-dev/os-builder/internal/exitcode"
)

// cacheTrustEnv names the certificates --cache-trust defaults to, a
// list like $PATH.
const cacheTrustEnv = "OSB_CACHE_TRUST"

// cacheSignFlags are the key cache entries are pushed signed with.
func cacheSignFlags(f *pflag.FlagSet, a *remotecache.Access) {
	f.StringVar(&a.SignKey, "cache-sign-key", "", "PEM private key pushed cache entries are signed with (see 'builder genkey')")
	f.StringVar(&a.SignCert, "cache-sign-cert", "", "PEM certificate of --cache-sign-key: what pullers give --cache-trust")
}

// cacheTrustFlags are the certificates pulled cache entries must be
// signed by, or the explicit choice to take any.
func cacheTrustFlags(f *pflag.FlagSet, a *remotecache.Access) {
	var trust []string
	if v := os.Getenv(cacheTrustEnv); v != "" {
		trust = filepath.SplitList(v)
	}
	f.StringArrayVar(&a.Trust, "cache-trust", trust, "take pulled cache entries signed with this certificate's key; others are misses (repeatable; default $"+cacheTrustEnv+", colon-separated)")
	f.BoolVar(&a.TrustUnsigned, "cache-trust-unsigned", false, "take pulled cache entries whoever signed them, if anyone: only for a repository only trusted builders can write")
}

// checkCacheAccess refuses, before anything runs, a push without a key
// or a pull that trusts nobody.
func checkCacheAccess(from, to string, a remotecache.Access) error {
	if from != "" {
		if _, err := a.PullOptions(); err != nil {
			return exitcode.UsageError(fmt.Errorf("--cache-from %s (or $%s): %w", from, cacheRepoEnv, err))
		}
	}
	if to != "" && (a.SignKey == "" || a.SignCert == "") {
		return exitcode.UsageError(fmt.Errorf("--cache-to %s (or $%s): %w", to, cacheRepoEnv, remotecache.ErrNoSignKey))
	}
	return nil
}

// cacheInsecureFlag is the family's --insecure, for cache repositories.
func cacheInsecureFlag(f *pflag.FlagSet, a *remotecache.Access) { icli.InsecureFlag(f, &a.Insecure) }
