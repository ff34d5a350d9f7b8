// Package depsrule holds the module's dependency rules as a test: the boot
// library stays free of Kubernetes (metal-operator consumes it from its own
// module, integrations/metal-operator), and libraries stay free of the CLI
// framework (only commands and their cli packages import cobra).
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

// violations applies the rules to a package graph.
func violations(graph map[string][]string) []string {
	var v []string
	for pkg, ds := range graph {
		boot := pkg == module+"/boot" || strings.HasPrefix(pkg, module+"/boot/")
		library := !strings.HasPrefix(pkg, module+"/cmd/") && !strings.HasSuffix(pkg, "/cli")
		for _, d := range ds {
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
	if _, ok := graph[module+"/boot"]; !ok {
		t.Fatalf("go list found no %s/boot: %d packages", module, len(graph))
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
		module + "/cmd/builder":  {"github.com/spf13/cobra", "k8s.io/api/core/v1"},
	})
	if len(got) != 2 || !strings.Contains(strings.Join(got, "\n"), "boot/redfish imports sigs.k8s.io/yaml") ||
		!strings.Contains(strings.Join(got, "\n"), "recipe imports github.com/spf13/cobra") {
		t.Fatalf("violations %q", got)
	}
}
