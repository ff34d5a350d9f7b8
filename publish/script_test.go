package publish_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/publish"
)

// helperEnv makes the test binary act as `builder push [--insecure] DIR REF`
// for the ci/publish.sh test (the CLI itself is built elsewhere).
const helperEnv = "PUBLISH_TEST_HELPER"

func pushHelper(args []string) int {
	var opts publish.Options
	if len(args) > 0 && args[0] == "--insecure" {
		opts.Insecure, args = true, args[1:]
	}
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: push [--insecure] DIR REF")
		return 2
	}
	d, err := publish.Push(context.Background(), args[0], args[1], opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(d)
	return 0
}

// TestPublishScript runs ci/publish.sh against the real registry with a
// stand-in builder whose build copies a fake output directory and whose push
// is publish.Push, and checks the tag scheme.
func TestPublishScript(t *testing.T) {
	host := requireRegistry(t)
	tmp := t.TempDir()
	fake := outputDir(t, "amd64")
	recipe := filepath.Join(tmp, "hypervisor.yaml")
	if err := os.WriteFile(recipe, []byte("name: hypervisor\nversion: \"1.2.0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	builder := filepath.Join(tmp, "builder")
	script := fmt.Sprintf(`#!/bin/bash
set -euo pipefail
case $1 in
build) mkdir -p "$4" && cp -r %q/. "$4"/ ;;
push) shift; %s=push exec %q "$@" ;;
*) exit 2 ;;
esac
`, fake, helperEnv, self)
	if err := os.WriteFile(builder, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, branch := range []string{"feature", "main"} {
		cmd := exec.Command("bash", "../ci/publish.sh", recipe)
		cmd.Env = append(os.Environ(),
			"OS_IMAGES_REGISTRY="+host+"/script-"+branch, "OS_IMAGES_INSECURE=1", "BUILDER="+builder,
			"OUT_DIR="+filepath.Join(tmp, "out"), "GIT_SHA=0123456789abcdef", "GIT_BRANCH="+branch)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("publish.sh on %s: %v\n%s", branch, err, out)
		}
		repo := host + "/script-" + branch + "/os-images/hypervisor"
		var digests []string
		for _, tag := range []string{"1.2.0", "1.2.0-0123456", "latest"} {
			ins, err := publish.Inspect(context.Background(), repo+":"+tag, insecure)
			if tag == "latest" && branch != "main" {
				if err == nil {
					t.Errorf("%s: latest pushed from a branch", branch)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: %v\n%s", tag, err, out)
			}
			digests = append(digests, ins.Digest)
		}
		for _, d := range digests[1:] {
			if d != digests[0] {
				t.Errorf("%s: tags point at different digests %s", branch, strings.Join(digests, " "))
			}
		}
	}
}
