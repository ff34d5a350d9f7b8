package rootfs

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/cache"
	"github.com/ironcore-dev/os-builder/initrd"
	osbcmdline "github.com/ironcore-dev/os-builder/initrd/cmdline"
	"github.com/ironcore-dev/os-builder/internal/filehash"
	"github.com/ironcore-dev/os-builder/internal/fsroot"
)

const initrdVersion = "4" // 4: the image's command line (layout.CmdlinePath)

// liftModules copies the modules names need (dependencies first) and the
// module index files out of the image tree into a small tree of the same
// shape, which is all the initrd step needs of the image. Everything is
// read inside the tree, whatever modules.dep names.
func liftModules(root *fsroot.Root, kver string, names []string, out string) error {
	files, err := initrd.ResolveModules(root, kver, names)
	if err != nil {
		return err
	}
	dir, err := initrd.ModulesDir(root, kver)
	if err != nil {
		return err
	}
	index, err := root.Glob(path.Join(dir, "modules.*"))
	if err != nil {
		return err
	}
	dest := filepath.Join(out, "usr/lib/modules", kver)
	for _, f := range index {
		files = append(files, path.Base(f))
	}
	for _, f := range files {
		// The lifted tree keeps modules.dep's names; they must stay in it.
		to := filepath.Join(dest, filepath.FromSlash(path.Clean("/"+f)))
		if err := copyOut(root, path.Join(dir, f), to, 0o644); err != nil {
			return fmt.Errorf("kernel %s: module %s: %w", kver, f, err)
		}
	}
	return nil
}

// initrdStep packs the init, the kernel modules and the tools the init runs
// into the initrd without a root image (disk boots, root by URL). The live
// initrd is this one after the root's layer segments (liveInitrd).
type initrdStep struct {
	kernel    string // kernel step output (modules)
	assembled string // assemble step output (the init's tools)
	init      string
	modules   []string
	cmdline   string // the osb.* words of the image's command line
	epoch     int64
}

// NewInitrd is the step that packs the init, the kernel's modules, the
// init's tools (from the assemble step's output) and the osb.* words of
// the image's kernel command line cmdline (InitrdCmdline) into the initrd
// without root.
func NewInitrd(k step.Kernel, a step.Assembled, init string, modules []string, cmdline string, epoch int64) step.Step {
	return &initrdStep{kernel: k.Dir, assembled: a.Dir, init: init, modules: modules, cmdline: InitrdCmdline(cmdline), epoch: epoch}
}

// InitrdCmdline is what the initrd carries of the image's kernel command
// line: its osb.* words, the ones the init reads (the kernel and systemd
// read only what the loader passes).
func InitrdCmdline(cmdline string) string {
	var words []string
	for _, w := range strings.Fields(cmdline) {
		if osbcmdline.IsOSB(w) {
			words = append(words, w)
		}
	}
	return strings.Join(words, " ")
}

// Initrd is the initrd in the initrd-noroot step's output out.
func Initrd(out string) string { return filepath.Join(out, step.InitrdFile) }

func (s *initrdStep) Name() string { return "initrd-noroot" }

func (s *initrdStep) Inputs() (cache.Inputs, error) {
	var in cache.Inputs
	in.Add("step-version", initrdVersion)
	d, err := filehash.SHA256(s.init)
	if err != nil {
		return nil, err
	}
	in.AddDigest("init", d)
	d, err = filehash.Tree(filepath.Join(s.kernel, step.ModulesDir))
	if err != nil {
		return nil, err
	}
	in.AddDigest("modules", d)
	if d, err = filehash.Tree(filepath.Join(s.assembled, step.InitrdFiles)); err != nil {
		return nil, err
	}
	in.AddDigest("tools", d)
	in.Add("module-names", strings.Join(s.modules, ","))
	in.Add("cmdline", s.cmdline)
	in.Add("source-date-epoch", strconv.FormatInt(s.epoch, 10))
	return in, nil
}

func (s *initrdStep) Run(ctx context.Context, out string) error {
	kver, err := step.Kernel{Dir: s.kernel}.Release()
	if err != nil {
		return err
	}
	list, err := fsroot.ReadFileIn(s.assembled, step.InitrdList, 16<<20)
	if err != nil {
		return err
	}
	return initrd.Assemble(initrd.AssembleOptions{
		InitBinary:      s.init,
		RootFS:          filepath.Join(s.kernel, step.ModulesDir),
		KernelRelease:   kver,
		Modules:         s.modules,
		Files:           strings.Fields(string(list)),
		FilesRoot:       filepath.Join(s.assembled, step.InitrdFiles),
		Cmdline:         s.cmdline,
		SourceDateEpoch: s.epoch,
		Output:          filepath.Join(out, step.InitrdFile),
	})
}
