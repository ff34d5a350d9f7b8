package sources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// Where a source's digest came from (osimage.Source.Origin).
const (
	OriginRecipe   = "recipe"   // pinned in the layer file
	OriginLock     = "lock"     // the recipe's lock file
	OriginResolved = "resolved" // resolved by the build itself
)

// LockError is a build with --locked whose recipe and lock do not agree:
// a source without a lock entry, a stale entry, a recipe digest the lock
// contradicts, or a lock file that does not parse. It is the caller's
// input that is wrong, not the build.
type LockError struct {
	Recipe string // as shown to the user
	Errs   []error
}

func (e *LockError) Error() string {
	var b strings.Builder
	for _, err := range e.Errs {
		b.WriteString(err.Error())
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "--locked builds only what the lock pins: run `builder lock %s` and review and commit the lock", e.Recipe)
	return b.String()
}

func (e *LockError) Unwrap() []error { return e.Errs }

// loadLock reads the lock of r; a recipe without one has a nil lock.
func loadLock(r *recipe.Recipe) (*recipe.Lock, error) {
	if r.Path == "" {
		return nil, nil
	}
	l, err := recipe.LoadLock(recipe.LockPath(r.Path))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return l, err
}

// PinSources returns r with every source of its layers (excluded ones
// aside) pinned to its digest: the one in the layer file, else the lock's,
// else (without locked) one resolved now, with a warning; r itself is left
// as it was. With locked, every source must be in the lock, every recipe
// digest must agree with it and no entry may be stale; all disagreements
// come back in one *LockError. The list names each source for the build
// manifest.
func PinSources(ctx context.Context, r *recipe.Recipe, locked bool, warnf func(format string, args ...any)) (*recipe.Recipe, []osimage.Source, error) {
	recipeName := recipe.DisplayPath(r.Path)
	lock, err := loadLock(r)
	if err != nil {
		return nil, nil, &LockError{Recipe: recipeName, Errs: []error{err}}
	}
	lockName := recipe.DisplayPath(recipe.LockPath(r.Path))
	if lock == nil {
		lockName += " (no such file)"
	}
	var problems []error
	disagree := func(err error) {
		if locked {
			problems = append(problems, err)
		} else {
			warnf("warning: %v", err)
		}
	}
	for _, i := range lock.Stale(r) {
		e := lock.Sources[i]
		disagree(lock.Errorf(i, "stale: layer %s has no %s source %s; run `builder lock %s`", e.Layer, e.Kind, e.Ref, recipeName))
	}
	var out []osimage.Source
	var pins []recipe.SourcePin
	for _, s := range r.Sources() {
		if s.Excluded {
			continue
		}
		entry, inLock := lock.Find(s)
		src := osimage.Source{Layer: s.Layer, Kind: string(s.Kind), Ref: s.Ref}
		switch {
		case s.Digest != "":
			// The layer's own pin wins; the lock must say the same.
			src.Digest, src.Origin = s.Digest, OriginRecipe
			if inLock && entry.Digest != s.Digest {
				disagree(s.Errorf("%s %s pins %s, but the lock %s has %s; run `builder lock %s`", s.Kind, s.Ref, s.Digest, lockName, entry.Digest, recipeName))
			} else if !inLock && locked {
				problems = append(problems, s.Errorf("%s %s of layer %s is not in the lock %s", s.Kind, s.Ref, s.Layer, lockName))
			}
		case inLock:
			pins = append(pins, recipe.SourcePin{Source: s, Digest: entry.Digest})
			src.Digest, src.Origin = entry.Digest, OriginLock
		case locked:
			problems = append(problems, s.Errorf("%s %s of layer %s is not locked in %s", s.Kind, s.Ref, s.Layer, lockName))
			continue
		default:
			d, err := resolveSource(ctx, s, r.Base.Architecture)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", s.Where(), err)
			}
			pins = append(pins, recipe.SourcePin{Source: s, Digest: d})
			src.Digest, src.Origin = d, OriginResolved
			warnf("warning: %s: %s %s of layer %s is not locked in %s; resolved to %s (recorded in the manifest; `builder lock %s` pins it)", s.Where(), s.Kind, s.Ref, s.Layer, lockName, d, recipeName)
		}
		out = append(out, src)
	}
	if len(problems) > 0 {
		return nil, nil, &LockError{Recipe: recipeName, Errs: problems}
	}
	return r.Pinned(pins), out, nil
}

// LockOptions control UpdateLock.
type LockOptions struct {
	// Update resolves sources again that the lock already has: those of
	// Layers, or of every layer when Layers is empty. Without Update,
	// existing entries are kept and only missing ones resolved.
	Update bool
	Layers []string
}

// LockChange is one difference between the old lock and the new one.
type LockChange struct {
	What      string // "added", "updated", "removed"
	Source    recipe.LockedSource
	OldDigest string // for "updated"
}

// UpdateLock computes r's lock from old (nil: none): one entry per source
// of every layer. A digest in the layer file wins; an existing entry is
// kept unless its layer is updated; anything else is resolved (image tag ->
// manifest or index digest, through OSB_REGISTRY_MIRRORS as builds pull;
// module -> go.sum hash from `go mod download`). Sources of excluded
// layers are not resolved: their existing entries are kept, and nothing is
// recorded for those without. Entries for sources the recipe no longer has
// are dropped. Every source that cannot be resolved is reported.
func UpdateLock(ctx context.Context, r *recipe.Recipe, old *recipe.Lock, opts LockOptions) (*recipe.Lock, []LockChange, error) {
	updating := func(layer string) bool {
		return opts.Update && (len(opts.Layers) == 0 || slices.Contains(opts.Layers, layer))
	}
	next := &recipe.Lock{Version: recipe.LockVersion, Path: recipe.LockPath(r.Path)}
	var errs []error
	for _, s := range r.Sources() {
		e := recipe.LockedSource{Layer: s.Layer, Kind: s.Kind, Ref: s.Ref}
		if _, dup := next.Find(s); dup {
			continue
		}
		prev, inLock := old.Find(s)
		switch {
		case s.Excluded:
			if !inLock {
				continue
			}
			e.Digest = prev.Digest
		case s.Digest != "":
			e.Digest = s.Digest
		case inLock && !updating(s.Layer):
			e.Digest = prev.Digest
		default:
			d, err := resolveSource(ctx, s, r.Base.Architecture)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.Where(), err))
				continue
			}
			e.Digest = d
		}
		next.Sources = append(next.Sources, e)
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	next.Sources = recipe.SortedLockedSources(next.Sources)

	var changes []LockChange
	for _, e := range next.Sources {
		prev, ok := old.FindEntry(e)
		switch {
		case !ok:
			changes = append(changes, LockChange{What: "added", Source: e})
		case prev.Digest != e.Digest:
			changes = append(changes, LockChange{What: "updated", Source: e, OldDigest: prev.Digest})
		}
	}
	if old != nil {
		for _, e := range old.Sources {
			if _, ok := next.FindEntry(e); !ok {
				changes = append(changes, LockChange{What: "removed", Source: e})
			}
		}
	}
	return next, changes, nil
}

// resolveSource finds the digest of a source the recipe does not pin.
func resolveSource(ctx context.Context, s recipe.Source, arch string) (string, error) {
	if s.Kind == recipe.SourceOCI {
		return resolveImage(ctx, s.Ref, s.Layer)
	}
	module, version, _ := strings.Cut(s.Ref, "@")
	_, sum, err := goModDownload(ctx, module, version, "", goBuildEnv(arch, false))
	if err != nil {
		err = fmt.Errorf("layer %s: %w", s.Layer, err)
		if strings.Contains(err.Error(), "verifying") || strings.Contains(err.Error(), "sumdb") || strings.Contains(err.Error(), "sum.golang.org") {
			err = fmt.Errorf("%w\n(where the checksum database cannot vouch for it, GONOSUMDB=%s takes the module proxy's sum: review it in the lock's diff)", err, module)
		}
		return "", err
	}
	return sum, nil
}

// resolveImage asks the registry (or its mirror) which manifest or index
// the tag ref names now, and returns its digest.
func resolveImage(ctx context.Context, ref, layer string) (string, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("layer %s: image %q: %w", layer, ref, err)
	}
	mirrors, err := RegistryMirrorsFromEnv()
	if err != nil {
		return "", err
	}
	pull, via, err := mirrors.RewriteRef(tag)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, ociHeaderTimeout)
	defer cancel()
	opts := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithTransport(ociTransport()),
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 2}),
	}
	desc, err := remote.Head(pull, opts...)
	var terr *transport.Error
	if errors.As(err, &terr) {
		// The registry answered but not to HEAD (some omit the digest
		// header there): GET the manifest itself.
		if d, gerr := remote.Get(pull, opts...); gerr == nil {
			desc, err = &d.Descriptor, nil
		}
	}
	if err != nil {
		return "", unreachableError(ref, layer, via, err)
	}
	return desc.Digest.String(), nil
}
