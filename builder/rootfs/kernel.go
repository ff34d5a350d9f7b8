package rootfs

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

const kernelVersion = "1"

// kernelStep lifts the kernel and the initrd's modules out of the layers
// below assemble: they come from packages, so a changed unit or file
// (assemble) does not lift them again. assemble refuses layer files that
// would change them (checkKernelUntouched).
type kernelStep struct {
	lowers   []string // layer step outputs, bottom first
	lowerKey string   // the input key of the top one (it chains the rest)
	arch     string
	modules  []string
	work     string
}

// NewKernel is the step that lifts the kernel for arch and modules (with
// what they depend on) out of the layers below assemble.
func NewKernel(below step.Stack, arch string, modules []string, work string) step.Step {
	return &kernelStep{lowers: below.Dirs(), lowerKey: below.Key, arch: arch, modules: modules, work: work}
}

func (s *kernelStep) Name() string { return "kernel" }

func (s *kernelStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", kernelVersion)
	in.AddDigest("lower-layers", s.lowerKey)
	in.Add("modules", strings.Join(s.modules, ","))
	return in, nil
}

func (s *kernelStep) Run(ctx context.Context, out string) error {
	upper, err := overLayers(ctx, s.lowers, s.work, func(root *fsroot.Root) error {
		return liftKernel(root, s.arch, s.modules, out)
	})
	if err != nil {
		return err
	}
	return os.RemoveAll(upper) // nothing was written
}

// liftKernel copies the kernel, its release and the initrd's modules (with
// their dependencies and the module index) out of the tree.
func liftKernel(root *fsroot.Root, arch string, modules []string, out string) error {
	kvers, err := root.Glob("/lib/modules/*")
	if err != nil || len(kvers) == 0 {
		return fmt.Errorf("no kernel in the image: add linux-image-%s to the packages", arch)
	}
	if len(kvers) > 1 {
		return fmt.Errorf("more than one kernel in the image: %v", kvers)
	}
	kver := path.Base(kvers[0])
	if err := copyOut(root, "/boot/vmlinuz-"+kver, filepath.Join(out, step.KernelImage), 0o644); err != nil {
		return fmt.Errorf("kernel %s: %w", kver, err)
	}
	if err := os.WriteFile(filepath.Join(out, step.KernelRelease), []byte(kver+"\n"), 0o644); err != nil {
		return err
	}
	return liftModules(root, kver, modules, filepath.Join(out, step.ModulesDir))
}

// kernelPaths are where the image keeps its kernel and modules, relative to
// the root: what kernelStep lifts from the layers below assemble.
var kernelPaths = []string{"boot", "usr/lib/modules", "lib/modules"}

// checkKernelUntouched fails when assemble's upper directory (what the
// recipe's files, units and users changed) holds anything under the
// kernel's paths: the kernel step lifted them from the layers below, and
// the image must boot the kernel it ships.
func checkKernelUntouched(upper string) error {
	for _, p := range kernelPaths {
		_, err := os.Lstat(filepath.Join(upper, p))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("the recipe's files change /%s: the kernel and its modules come from the base's packages (install a kernel or module package instead)", p)
	}
	return nil
}
