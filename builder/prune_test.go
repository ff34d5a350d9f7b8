package builder

import (
	"slices"
	"testing"

	"github.com/ironcore-dev/os-builder/recipe"
)

// TestManifestPrune: manifest.json records what the hypervisor recipe
// leaves out, the defaults expanded; a recipe that prunes nothing has no
// prune record (and the test recipe's manifests stay as they were).
func TestManifestPrune(t *testing.T) {
	hv, err := recipe.Load("../recipes/hypervisor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := manifestPrune(hv)
	if p == nil || !slices.Contains(p.Exclude, recipe.DefaultPruneExclude[0]) ||
		!slices.Contains(p.Exclude, "/usr/bin/radosgw-admin") || !slices.Equal(p.Remove, hv.Prune.Remove) {
		t.Errorf("hypervisor manifest prune = %+v", p)
	}
	test, err := recipe.Load("../recipes/test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p := manifestPrune(test); p != nil {
		t.Errorf("test recipe manifest prune = %+v, want none", p)
	}
}
