package builder

import (
	"fmt"
	"slices"

	"github.com/ironcore-dev/os-builder/builder/artifacts"
	"github.com/ironcore-dev/os-builder/builder/progress"
	"github.com/ironcore-dev/os-builder/builder/rootfs"
	"github.com/ironcore-dev/os-builder/builder/sources"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/initrd"
)

// node is one row of the build's table: a cached step or an artifact
// writer, what it needs (the values of the nodes before it, which are the
// graph's edges) and what it hands on.
type node struct {
	name      string
	needs     []step.Handover
	gives     []step.Handover
	jobs, mem int
	layer     string // for errors: the layer the step comes from
	// step makes the cached step once its needs are set; done hands on
	// its values from the step's output directory.
	step   func() (step.Step, error)
	done   func(s step.Step, dir string) error
	writer *artifacts.Writer
}

// deps names the nodes whose values n reads, each once, in need order.
func (n node) deps() []string {
	var deps []string
	for _, h := range n.needs {
		if d := h.From(); !slices.Contains(deps, d) {
			deps = append(deps, d)
		}
	}
	return deps
}

// values are what the table's nodes hand on, for the nodes after them and
// for the manifest.
type values struct {
	base      *step.Value[step.Stack] // bootstrap: the base layer
	packages  *step.Value[string]     // bootstrap: the installed packages' list
	sources   []*step.Value[[]step.Binary]
	below     *step.Value[step.Stack] // the layers under assemble: binaries', else base
	init      *step.Value[string]
	stack     *step.Value[step.Stack] // assemble: the whole root, bottom first
	assembled *step.Value[step.Assembled]
	kernel    *step.Value[step.Kernel]
	noRoot    *step.Value[string]
}

// binaries are the go and oci steps' files, in recipe order.
func (v *values) binaries() []step.Binary {
	var bins []step.Binary
	for _, s := range v.sources {
		bins = append(bins, s.Get()...)
	}
	return bins
}

// table declares the build: its nodes in the order the graph breaks ties
// in, and the values they hand on. Writers write into stage ("" when the
// table is only looked at).
func (b *buildRun) table(stage string) ([]node, *values) {
	v := &values{
		base:      step.NewValue[step.Stack]("bootstrap", "the base layer"),
		packages:  step.NewValue[string]("bootstrap", "the package list"),
		init:      step.NewValue[string]("init", "the init"),
		stack:     step.NewValue[step.Stack]("assemble", "the root's layers"),
		assembled: step.NewValue[step.Assembled]("assemble", "os-release, the stub, the init's tools"),
		kernel:    step.NewValue[step.Kernel]("kernel", "the kernel and its modules"),
		noRoot:    step.NewValue[string]("initrd-noroot", "the initrd without root"),
	}
	modules := dedup(append(append([]string(nil), initrd.DefaultModules...), b.r.Kernel.Modules...))
	// The root in layers, each a cached step: the packages (bootstrap),
	// the go/oci binaries, then what the layers add (assemble). A change
	// above the base re-squashes only the layers above it; a stack's key
	// is its top layer's, which chains the ones under it.
	ns := []node{b.bootstrapNode(v)}
	ns = append(ns, b.sourceNodes(v)...)
	ns = append(ns, b.rootNodes(v, modules)...)
	in := artifacts.Inputs{Stack: v.stack, Assembled: v.assembled, Kernel: v.kernel, NoRoot: v.noRoot}
	for _, w := range artifacts.Writers(b.art, in, stage) {
		ns = append(ns, node{name: w.Name, needs: w.Needs, gives: w.Gives(), jobs: 1, mem: 1024, writer: w})
	}
	return ns, v
}

// bootstrapNode is the base layer: the recipe's packages.
func (b *buildRun) bootstrapNode(v *values) node {
	cacheDir := b.opts.CacheDir
	if b.opts.NoCache {
		cacheDir = "" // no .deb pool either
	}
	return node{
		name: "bootstrap", gives: []step.Handover{v.base, v.packages}, jobs: 1, mem: 1024,
		step: func() (step.Step, error) {
			return rootfs.NewBootstrap(b.r, rootfs.PackageSet(b.r), b.epoch, b.work, cacheDir, b.nativeDpkg(), b.log.Infof), nil
		},
		done: func(s step.Step, dir string) error {
			key, err := stepKey(s)
			v.base.Set(step.Stack{}.On(rootfs.BaseLayer(dir), key))
			v.packages.Set(rootfs.PackageList(dir))
			return err
		},
	}
}

// sourceNodes are the go and oci sources, each a node of its own, and
// the binaries layer made of what they give (none without sources).
func (b *buildRun) sourceNodes(v *values) []node {
	arch := b.r.Base.Architecture
	var ns []node
	names := map[string]int{}
	unique := func(name string) string {
		names[name]++
		if n := names[name]; n > 1 {
			return fmt.Sprintf("%s#%d", name, n)
		}
		return name
	}
	// binarySource is a go or oci step: its output holds files for the root.
	type binarySource interface {
		step.Step
		Binaries(out string) ([]step.Binary, error)
	}
	source := func(s binarySource, layer string, mem int) {
		name := unique(s.Name())
		bins := step.NewValue[[]step.Binary](name, "its files")
		v.sources = append(v.sources, bins)
		ns = append(ns, node{
			name: name, gives: []step.Handover{bins}, jobs: 1, mem: mem, layer: layer,
			step: func() (step.Step, error) { return s, nil },
			done: func(_ step.Step, dir string) error {
				got, err := s.Binaries(dir)
				bins.Set(got)
				return err
			},
		})
	}
	for _, l := range b.r.Resolved {
		for _, g := range l.Go {
			source(sources.NewGoBuild(g, arch), l.Name, 2048)
		}
		for _, o := range l.OCI {
			source(sources.NewOCI(o, arch, sources.OCIStoreDir(b.opts.CacheDir)), l.Name, 256)
		}
	}
	v.below = v.base
	if len(v.sources) > 0 {
		v.below = step.NewValue[step.Stack]("binaries", "the layers below assemble")
		needs := []step.Handover{v.base}
		for _, s := range v.sources {
			needs = append(needs, s)
		}
		ns = append(ns, node{
			name: "binaries", needs: needs, gives: []step.Handover{v.below}, jobs: 1, mem: 1024,
			step: func() (step.Step, error) {
				return bytesMetered{Step: rootfs.NewBinaries(v.base.Get(), v.binaries(), b.epoch, b.work)}, nil
			},
			done: func(s step.Step, dir string) error {
				key, err := stepKey(s)
				v.below.Set(v.base.Get().On(rootfs.BinariesLayer(dir), key))
				return err
			},
		})
	}
	return ns
}

// rootNodes are the init, the root's top layer (assemble), the kernel
// and the initrd without root.
func (b *buildRun) rootNodes(v *values, modules []string) []node {
	arch := b.r.Base.Architecture
	return []node{{
		name: "init", gives: []step.Handover{v.init}, jobs: 1, mem: 512,
		step: func() (step.Step, error) { return sources.NewInit(arch, b.opts.Init, b.log.Infof), nil },
		done: func(_ step.Step, dir string) error { v.init.Set(sources.InitBinary(dir)); return nil },
	}, node{
		name: "assemble", needs: []step.Handover{v.below}, gives: []step.Handover{v.stack, v.assembled}, jobs: 2, mem: 1024,
		step: func() (step.Step, error) {
			return bytesMetered{Step: rootfs.NewAssemble(b.r, v.below.Get(), b.epoch, b.work)}, nil
		},
		done: func(_ step.Step, dir string) error {
			// No key for the top: nothing is keyed on the whole stack
			// (writers key on its images), and assemble's inputs hash
			// every file and unit of the recipe, which the runner did.
			v.stack.Set(v.below.Get().On(rootfs.TopLayer(dir), ""))
			v.assembled.Set(step.Assembled{Dir: dir})
			return nil
		},
	}, node{
		// The kernel and modules from the same layers as assemble: a
		// changed unit or file does not lift them again.
		name: "kernel", needs: []step.Handover{v.below}, gives: []step.Handover{v.kernel}, jobs: 1, mem: 512,
		step: func() (step.Step, error) {
			return rootfs.NewKernel(v.below.Get(), arch, modules, b.work), nil
		},
		done: func(_ step.Step, dir string) error { v.kernel.Set(step.Kernel{Dir: dir}); return nil },
	}, node{
		// The initrd without root: disk boots and root by URL; the live
		// initrd is the root's layers before it (the initrd writer).
		name: "initrd-noroot", needs: []step.Handover{v.kernel, v.assembled, v.init}, gives: []step.Handover{v.noRoot}, jobs: 1, mem: 1024,
		step: func() (step.Step, error) {
			s := rootfs.NewInitrd(v.kernel.Get(), v.assembled.Get(), v.init.Get(), modules, b.cmdline(), b.epoch)
			return bytesMetered{Step: s, total: func() int64 {
				return progress.DirSize(v.kernel.Get().Modules()) + progress.DirSize(v.init.Get())
			}}, nil
		},
		done: func(_ step.Step, dir string) error { v.noRoot.Set(rootfs.Initrd(dir)); return nil },
	}}
}

// stepKey is the key of a step's inputs.
func stepKey(s step.Step) (string, error) {
	in, err := s.Inputs()
	if err != nil {
		return "", err
	}
	return in.Key(), nil
}
