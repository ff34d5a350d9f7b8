package builder

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/initrd"
)

const initrdVersion = "1"

const initrdFile = "initrd.img"

func defaultInitrdModules() []string { return initrd.DefaultModules }

// liftModules copies the modules names need (dependencies first) out of the
// image tree, with a load-order list, for the initrd step.
func liftModules(root, kver string, names []string, out string) error {
	files, err := initrd.ResolveModules(root, kver, names)
	if err != nil {
		return err
	}
	dir, err := initrd.ModulesDir(root, kver)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := copyFile(filepath.Join(dir, f), filepath.Join(out, f), 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(out, "order"), []byte(strings.Join(files, "\n")+"\n"), 0o644)
}

// initrdStep packs the init, the kernel modules and the root image into the
// live initrd.
type initrdStep struct {
	assembled string
	init      string
	epoch     int64
}

func (s *initrdStep) Name() string { return "initrd" }

func (s *initrdStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", initrdVersion)
	for name, p := range map[string]string{"init": s.init, "root-image": filepath.Join(s.assembled, rootImage)} {
		d, err := digestFile(p)
		if err != nil {
			return nil, err
		}
		in.AddDigest(name, d)
	}
	d, err := digestTree(filepath.Join(s.assembled, modulesDir))
	if err != nil {
		return nil, err
	}
	in.AddDigest("modules", d)
	in.Add("source-date-epoch", strconv.FormatInt(s.epoch, 10))
	return in, nil
}

func (s *initrdStep) Run(ctx context.Context, out string) error {
	kver, err := readKernelRelease(s.assembled)
	if err != nil {
		return err
	}
	return initrd.Assemble(initrd.AssembleOptions{
		Init:            s.init,
		ModulesDir:      filepath.Join(s.assembled, modulesDir),
		KernelRelease:   kver,
		RootImage:       filepath.Join(s.assembled, rootImage),
		SourceDateEpoch: s.epoch,
		Output:          filepath.Join(out, initrdFile),
	})
}

// buildInit compiles the initrd's init for this build.
func buildInit(ctx context.Context, work string) (string, error) {
	p := filepath.Join(work, "init")
	return p, initrd.BuildInitBinary(ctx, p)
}
