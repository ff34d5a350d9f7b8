package recipe

import (
	"encoding/json"
	"fmt"

	"sigs.k8s.io/yaml"
)

// rendered is what Render prints: the recipe with defaults applied and its
// layers inlined in apply order, plus the merged result. Paths are relative
// to the recipe's directory so the output does not depend on the checkout.
type rendered struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Base     Base     `json:"base"`
	UnitsDir string   `json:"unitsDir"`
	Kernel   Kernel   `json:"kernel"`
	Outputs  []Output `json:"outputs"`
	Exclude  []string `json:"exclude,omitempty"`
	// Disk and PersistRequired: the effective values.
	Disk            Disk `json:"disk"`
	PersistRequired bool `json:"persistRequired"`
	// Prune: the effective lists (defaults expanded), when any.
	Prune  *Prune  `json:"prune,omitempty"`
	Layers []Layer `json:"layers"`
	Merged merged  `json:"merged"`
}

type merged struct {
	Packages []string       `json:"packages"`
	Files    []ResolvedFile `json:"files"`
	Units    []ResolvedUnit `json:"units"`
	Users    []User         `json:"users"`
	Groups   []Group        `json:"groups"`
	Cmdline  string         `json:"cmdline"`
}

func ptr[T any](v T) *T { return &v }

// Render prints the fully resolved recipe as "yaml" or "json". The output is
// deterministic: same files in, same bytes out.
func Render(r *Recipe, format string) ([]byte, error) {
	out := rendered{
		Name:            r.Name,
		Version:         r.Version,
		Base:            r.Base,
		UnitsDir:        r.UnitsDir,
		Kernel:          r.Kernel,
		Outputs:         r.Outputs,
		Exclude:         r.Exclude,
		Disk:            Disk{DataSizeMiB: ptr(r.DataSizeMiB())},
		PersistRequired: r.PersistRequired,
		Layers:          make([]Layer, len(r.Resolved)),
		Merged: merged{
			Packages: nonNil(r.Packages()),
			Files:    nonNil(r.Files()),
			Units:    nonNil(r.Units()),
			Users:    nonNil(r.Users()),
			Groups:   nonNil(r.Groups()),
			Cmdline:  r.Cmdline(),
		},
	}
	if p := (Prune{Exclude: r.PruneExclude(), Include: r.PruneInclude(), Remove: r.PruneRemove()}); len(p.Exclude)+len(p.Include)+len(p.Remove) > 0 {
		out.Prune = &p
	}
	for i, l := range r.Resolved {
		out.Layers[i] = *l
		out.Layers[i].Path = r.relPath(l.Path)
		out.Layers[i].Include = nil // already inlined
	}
	for i := range out.Merged.Files {
		out.Merged.Files[i].Source = r.relPath(out.Merged.Files[i].Source)
	}
	for i := range out.Merged.Units {
		out.Merged.Units[i].Path = r.relPath(out.Merged.Units[i].Path)
	}

	switch format {
	case "yaml":
		b, err := yaml.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("render recipe %s as yaml: %w", r.Name, err)
		}
		return b, nil
	case "json":
		b, err := json.MarshalIndent(out, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("render recipe %s as json: %w", r.Name, err)
		}
		return append(b, '\n'), nil
	default:
		return nil, fmt.Errorf("render recipe %s: unknown format %q (yaml or json)", r.Name, format)
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
