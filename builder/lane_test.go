package builder

import (
	"context"

	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
)

// buildLane builds r, a recipe of one architecture, into opts.OutputDir:
// Build of its one lane.
func buildLane(ctx context.Context, r *recipe.Recipe, opts Options) (*osimage.BuildManifest, error) {
	ms, err := Build(ctx, Lane{Recipe: r, Options: opts})
	if err != nil {
		return nil, err
	}
	return ms[0], nil
}

// planLane is PlanBuild of r's one lane.
func planLane(ctx context.Context, r *recipe.Recipe, opts Options) (*Plan, error) {
	ps, err := PlanBuild(ctx, Lane{Recipe: r, Options: opts})
	if err != nil {
		return nil, err
	}
	return ps[0], nil
}
