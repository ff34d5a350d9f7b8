// Package depsrule holds the module's dependency rules as a test: the boot
// library stays free of Kubernetes (metal-operator consumes it from its own
// module, integrations/metal-operator), libraries stay free of the CLI
// framework (only commands and their cli packages import cobra), and the
// initrd's init (cmd/init) links nothing but the standard library,
// golang.org/x/sys and this module's own packages: it is PID 1 of every
// node, and what it links is all it can trust. Only cmd/init links the init
// (initrd/pid1), and cmd/builder links none of the init's packages: the
// paths both sides agree on are in initrd/layout, so the builder does not
// carry the init's disk code or network stack. internal/... is the bottom floor: it
// imports nothing of the module outside internal/. Test-support packages
// (qemutest, osimagetest, internal/testutil, ...) stay out of production
// binaries: no other package of the module imports them. The builder's step
// packages (sources, rootfs, artifacts) import each other only through the
// vocabulary, builder/step, and neither they nor what they build on (step,
// progress, command, graph) import the builder above them. The step cache
// (cache/...) is below the builder: it imports nothing under builder/ (the
// remote cache's decorator of the step runner is builder/remotecache).
package depsrule

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/ironcore-dev/os-builder"

// deps lists every package of the main module with its transitive imports
// (go list -deps, here as the Deps field of each package).
func deps(t *testing.T) map[string][]string {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	m := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			m[f[0]] = f[1:]
		}
	}
	return m
}

// initAllowed: what cmd/init may link. The standard library's import paths
// have no dot in their first element (its vendored golang.org/x packages
// are under "vendor/").
func initAllowed(d string) bool {
	first, _, _ := strings.Cut(d, "/")
	return !strings.Contains(first, ".") ||
		d == "golang.org/x/sys" || strings.HasPrefix(d, "golang.org/x/sys/") ||
		d == module || strings.HasPrefix(d, module+"/")
}

// initPackages: the init, its disk knowledge and its network stack, which
// only the init needs.
var initPackages = map[string]bool{
	module + "/initrd/pid1":    true,
	module + "/initrd/disk":    true,
	module + "/initrd/netconf": true,
	module + "/initrd/dhcp4":   true,
	module + "/initrd/dhcp6":   true,
	module + "/initrd/slaac":   true,
	module + "/initrd/netlink": true,
}

// under reports whether pkg is dir or below it.
func under(pkg, dir string) bool {
	return pkg == dir || strings.HasPrefix(pkg, dir+"/")
}

// testSupport reports whether pkg, a package of this module, is one only
// tests import: its path ends in "test" (qemutest, osimagetest, gpttest,
// buildertest) or it is internal/testutil or below. Packages outside the
// module are not judged: every package's deps hold the standard library's
// internal/synctest.
func testSupport(pkg string) bool {
	return under(pkg, module) && (strings.HasSuffix(pkg, "test") || strings.Contains(pkg, "/testutil"))
}

// stepPackages implement the build's steps; they speak to each other only
// through builder/step, the vocabulary.
var stepPackages = []string{module + "/builder/sources", module + "/builder/rootfs", module + "/builder/artifacts"}

// buildBelow are what the step packages build on: none of them may import
// a step package or the builder above them.
var buildBelow = []string{module + "/builder/step", module + "/builder/progress", module + "/builder/command", module + "/builder/graph"}

// layerOf names pkg's layer of the builder: "step" for a step package,
// "below" for what they build on, "" otherwise.
func layerOf(pkg string) string {
	for _, p := range stepPackages {
		if under(pkg, p) {
			return "step"
		}
	}
	for _, p := range buildBelow {
		if under(pkg, p) {
			return "below"
		}
	}
	return ""
}

// violations applies the rules to a package graph.
func violations(graph map[string][]string) []string {
	var v []string
	for pkg, ds := range graph {
		boot := under(pkg, module+"/boot")
		library := !strings.HasPrefix(pkg, module+"/cmd/") && !strings.HasSuffix(pkg, "/cli")
		isInit := pkg == module+"/cmd/init"
		isBuilder := pkg == module+"/cmd/builder"
		internal := under(pkg, module+"/internal")
		production := !testSupport(pkg)
		layer := layerOf(pkg)
		cacheLib := under(pkg, module+"/cache")
		for _, d := range ds {
			upper := d == module+"/builder" || under(d, module+"/builder/cli")
			switch {
			case layer == "step" && layerOf(d) == "step" && !under(d, pkg):
				v = append(v, pkg+" imports "+d+" (step packages speak to each other through builder/step only)")
			case layer == "step" && upper:
				v = append(v, pkg+" imports "+d+" (step packages are below the builder)")
			case layer == "below" && (layerOf(d) == "step" || upper):
				v = append(v, pkg+" imports "+d+" (builder/step, progress, command and graph are below the step packages)")
			}
			if cacheLib && under(d, module+"/builder") {
				v = append(v, pkg+" imports "+d+" (cache/... is below the builder: it imports nothing under builder/)")
			}
			if isInit && !initAllowed(d) {
				v = append(v, pkg+" links "+d+" (cmd/init links only the standard library and golang.org/x/sys)")
			}
			if d == module+"/initrd/pid1" && !isInit {
				v = append(v, pkg+" links "+d+" (only cmd/init links the init; shared paths are in initrd/layout)")
			} else if isBuilder && initPackages[d] {
				v = append(v, pkg+" links "+d+" (cmd/builder links none of the init's packages)")
			}
			if internal && under(d, module) && !under(d, module+"/internal") {
				v = append(v, pkg+" imports "+d+" (internal/... imports nothing of the module outside internal/)")
			}
			if production && testSupport(d) {
				v = append(v, pkg+" imports "+d+" (test-support packages stay out of non-test packages)")
			}
			if boot && (strings.HasPrefix(d, "k8s.io/") || strings.HasPrefix(d, "sigs.k8s.io/")) {
				v = append(v, pkg+" imports "+d+" (boot/... stays free of Kubernetes)")
			}
			if library && (d == "github.com/spf13/cobra" || strings.HasPrefix(d, "github.com/spf13/cobra/")) {
				v = append(v, pkg+" imports "+d+" (only cmd/... and */cli import cobra)")
			}
		}
	}
	return v
}

func TestDependencyRules(t *testing.T) {
	graph := deps(t)
	for _, p := range []string{module + "/boot", module + "/cmd/init", module + "/cmd/builder", module + "/internal/testutil"} {
		if _, ok := graph[p]; !ok {
			t.Fatalf("go list found no %s: %d packages", p, len(graph))
		}
	}
	for _, v := range violations(graph) {
		t.Error(v)
	}
}

// TestViolationsCaught: the rules see through transitive imports.
func TestViolationsCaught(t *testing.T) {
	got := violations(map[string][]string{
		module + "/boot/redfish": {"net/http", "sigs.k8s.io/yaml"},
		module + "/recipe":       {"github.com/spf13/cobra"},
		module + "/boot/cli":     {"github.com/spf13/cobra"},
		// cmd/builder: the init's disk and network packages count even
		// without pid1.
		module + "/cmd/builder": {"github.com/spf13/cobra", "k8s.io/api/core/v1",
			module + "/initrd", module + "/initrd/layout", module + "/initrd/netlink", module + "/initrd/disk"},
		// Only cmd/init links pid1; the init's own packages link each other.
		module + "/builder/rootfs": {module + "/initrd/layout", module + "/initrd/pid1"},
		module + "/initrd":         {module + "/initrd/pid1"},
		module + "/initrd/pid1":    {module + "/initrd/netconf", module + "/initrd/netlink", module + "/internal/keyvalue"},
		module + "/initrd/netconf": {module + "/initrd/dhcp4", module + "/initrd/netlink"},
		// internal/... stays among itself, whatever the name's prefix says.
		module + "/internal/testutil": {module + "/internal/fsroot", module + "/recipe"},
		module + "/internal/qemu":     {"golang.org/x/sys/unix", module + "/internalx"},
		// cmd/init: what its own packages pull in counts (go list -deps).
		module + "/cmd/init": {"net/http", "vendor/golang.org/x/net/idna", "golang.org/x/sys/unix",
			module + "/initrd/pid1", module + "/initrd/gpt", "github.com/klauspost/compress/zstd", "golang.org/x/sysfoo"},
		// Other commands may link what they like.
		module + "/cmd/serverboot": {"github.com/klauspost/compress/zstd"},
		// Test-support packages: not in production packages, even
		// transitively; among themselves they may; the standard library's
		// names (internal/synctest, net/http/httptest) are not judged.
		module + "/redfishemu/qemutier": {"internal/synctest", module + "/internal/qemu", module + "/internal/qemu/qemutest"},
		module + "/uki":                 {module + "/internal/testutil/uefiboot", module + "/internal/testutil"},
		module + "/publish":             {module + "/osimage/osimagetest"},
		module + "/initrd/gpt":          {module + "/initrd/gpt/gpttest"},
		module + "/builder/step":        {module + "/builder/internal/buildertest"},
		module + "/cmd/redfish-emulator": {"net/http/httptest", "internal/synctest",
			module + "/internal/qemu"},
		module + "/internal/testutil/uefiboot": {module + "/internal/qemu/qemutest", module + "/internal/testutil"},
		module + "/osimage/osimagetest":        {module + "/internal/testutil", module + "/osimage"},
		// The builder's layers: step packages through the vocabulary only.
		module + "/builder/artifacts": {module + "/builder/step", module + "/builder/progress", module + "/builder/rootfs"},
		module + "/builder/sources":   {module + "/builder/step", module + "/builder/command", module + "/builder"},
		module + "/builder/progress":  {module + "/builder/artifacts"},
		module + "/builder/command":   {"os/exec"},
		module + "/builder":           {module + "/builder/sources", module + "/builder/rootfs", module + "/builder/artifacts", module + "/builder/step"},
		// The cache is below the builder; the remote cache's runner
		// decorator, above both, may import either.
		module + "/cache/remote":        {module + "/cache", module + "/builder/step"},
		module + "/cache":               {module + "/internal/ocirace", module + "/builderx"},
		module + "/builder/remotecache": {module + "/builder/step", module + "/cache", module + "/cache/remote"},
	})
	want := []string{
		"boot/redfish imports sigs.k8s.io/yaml",
		"recipe imports github.com/spf13/cobra",
		"cmd/init links github.com/klauspost/compress/zstd",
		"cmd/init links golang.org/x/sysfoo",
		"cmd/builder links " + module + "/initrd/netlink",
		"cmd/builder links " + module + "/initrd/disk",
		"builder/rootfs links " + module + "/initrd/pid1",
		"initrd links " + module + "/initrd/pid1",
		"internal/testutil imports " + module + "/recipe",
		"internal/qemu imports " + module + "/internalx",
		"redfishemu/qemutier imports " + module + "/internal/qemu/qemutest",
		"uki imports " + module + "/internal/testutil/uefiboot",
		"uki imports " + module + "/internal/testutil (",
		"publish imports " + module + "/osimage/osimagetest",
		"initrd/gpt imports " + module + "/initrd/gpt/gpttest",
		"builder/step imports " + module + "/builder/internal/buildertest",
		"builder/artifacts imports " + module + "/builder/rootfs (step packages speak",
		"builder/sources imports " + module + "/builder (step packages are below",
		"builder/progress imports " + module + "/builder/artifacts (builder/step, progress",
		"cache/remote imports " + module + "/builder/step (cache/... is below the builder",
	}
	all := strings.Join(got, "\n")
	if len(got) != len(want) {
		t.Errorf("%d violations, want %d:\n%s", len(got), len(want), all)
	}
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("no violation %q in:\n%s", w, all)
		}
	}
}
