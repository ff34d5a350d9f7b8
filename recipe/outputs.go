package recipe

// Output names a set of artifacts a recipe asks for (its outputs field).
// This is the one list of output names: validation, the builder's writers
// and the docs read it.
type Output string

// The outputs.
const (
	OutputPXE  Output = "pxe"  // kernel, live initrd, root image, initrd without root, cmdline
	OutputUKI  Output = "uki"  // a Unified Kernel Image
	OutputDisk Output = "disk" // a raw GPT disk
	OutputISO  Output = "iso"  // an ISO 9660 image with El Torito EFI
)

// Outputs are every output, in the order messages and docs list them.
var Outputs = []Output{OutputPXE, OutputUKI, OutputDisk, OutputISO}

// DefaultOutput is what Load gives a recipe that names none.
const DefaultOutput = OutputPXE

// OutputSet is the outputs a recipe asks for.
type OutputSet map[Output]bool

// OutputSet returns the recipe's outputs as a set; no outputs means the
// default one.
func (r *Recipe) OutputSet() OutputSet {
	set := OutputSet{}
	for _, o := range r.Outputs {
		set[o] = true
	}
	if len(set) == 0 {
		set[DefaultOutput] = true
	}
	return set
}

// NeedsStub says whether an output carries a UKI (uki, disk, iso): those
// need systemd-stub from the image itself, so that stub and kernel come
// from the same release.
func (o OutputSet) NeedsStub() bool { return o[OutputUKI] || o[OutputDisk] || o[OutputISO] }
