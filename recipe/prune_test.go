package recipe

import (
	"slices"
	"strings"
	"testing"
)

// TestPruneLists: the effective lists are the defaults (when on) and the
// recipe's own, in order, without repeats; the hypervisor recipe turns the
// defaults on and the test recipe prunes nothing (its cached images stay).
func TestPruneLists(t *testing.T) {
	r := &Recipe{Prune: Prune{
		Defaults: true,
		Exclude:  []string{"/usr/bin/x", DefaultPruneExclude[0], "/usr/bin/x"},
		Include:  []string{"/usr/include/keep.h"},
		Remove:   []string{"/usr/lib/python3*/__pycache__"},
	}}
	want := append(slices.Clone(DefaultPruneExclude), "/usr/bin/x")
	if got := r.PruneExclude(); !slices.Equal(got, want) {
		t.Errorf("PruneExclude() = %v\nwant %v", got, want)
	}
	if got := r.PruneInclude(); !slices.Equal(got, []string{"/usr/include/keep.h"}) {
		t.Errorf("PruneInclude() = %v", got)
	}
	if got := (&Recipe{Prune: Prune{Exclude: []string{"/a"}}}).PruneExclude(); !slices.Equal(got, []string{"/a"}) {
		t.Errorf("without defaults: %v", got)
	}
	for _, p := range DefaultPruneExclude {
		if !prunePatternRE.MatchString(p) {
			t.Errorf("default %q fails the recipe's own pattern rule", p)
		}
	}

	hv, err := Load("../recipes/hypervisor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !hv.Prune.Defaults || !slices.Contains(hv.PruneExclude(), "/usr/lib/modules/*/kernel/sound/*") {
		t.Errorf("hypervisor prune = %+v", hv.Prune)
	}
	for _, p := range hv.PruneExclude() {
		// What the hypervisor's units and checks run must stay.
		for _, keep := range []string{"/usr/bin/rbd", "/usr/bin/ceph", "/usr/bin/qemu-system-x86_64", "/usr/libexec/qemu-system-i386"} {
			if globMatch(p, keep) {
				t.Errorf("hypervisor prune pattern %q drops %s", p, keep)
			}
		}
	}
	test, err := Load("../recipes/test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(test.PruneExclude())+len(test.PruneInclude())+len(test.PruneRemove()) != 0 {
		t.Errorf("test recipe prunes: %+v", test.Prune)
	}
}

// globMatch is dpkg's matching for the test's few patterns: * matches any
// run of characters, / included.
func globMatch(pattern, name string) bool {
	before, after, found := strings.Cut(pattern, "*")
	if !found {
		return pattern == name
	}
	if !strings.HasPrefix(name, before) {
		return false
	}
	rest := name[len(before):]
	for i := 0; i <= len(rest); i++ {
		if globMatch(after, rest[i:]) {
			return true
		}
	}
	return false
}
