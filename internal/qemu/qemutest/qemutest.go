// Package qemutest is test support for package qemu: only tests import it
// (internal/depsrule keeps it out of production packages).
package qemutest

import (
	"context"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/qemu"
)

// StartT starts a VM for a test and stops it when the test ends, logging
// the console's tail if the test failed.
func StartT(t testing.TB, ctx context.Context, cfg qemu.Config) *qemu.VM {
	t.Helper()
	vm, err := qemu.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("console tail:\n%s", vm.Tail(60))
		}
		vm.Stop()
	})
	return vm
}
