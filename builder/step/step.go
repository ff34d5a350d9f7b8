// Package step is the build's vocabulary: what a cacheable step is, how a
// runner runs one, and the typed values steps hand on to the steps after
// them (layers, binaries, the kernel, the files an output directory holds).
// The packages that implement steps (sources, rootfs, artifacts) speak to
// each other only through it, so none imports another.
package step

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/ironcore-dev/os-builder/cache"
)

// Step is one unit of build work. Its output is a directory whose contents
// depend only on Inputs, which is what makes it cacheable.
type Step interface {
	// Name identifies the step in progress lines and --explain output.
	Name() string
	// Inputs are everything the output depends on.
	Inputs() (cache.Inputs, error)
	// Run writes the step's output into out, an empty directory.
	Run(ctx context.Context, out string) error
}

// Runner runs a step and returns the directory holding its output: into a
// fresh directory (Plain), or through the cache (the builder's cached
// runner, which looks the step's key up before running it).
type Runner interface {
	Run(ctx context.Context, s Step) (string, error)
}

// Plain runs every step into a fresh directory under Work.
type Plain struct{ Work string }

func (r Plain) Run(ctx context.Context, s Step) (string, error) {
	out, err := os.MkdirTemp(r.Work, SanitizeName(s.Name())+"-")
	if err != nil {
		return "", err
	}
	if err := s.Run(ctx, out); err != nil {
		return "", err
	}
	return out, nil
}

// SanitizeName makes a step name usable in a file name.
func SanitizeName(s string) string {
	return strings.NewReplacer("/", "_", " ", "_", ":", "_").Replace(filepath.Clean(s))
}

// Value is what one node of the build hands on to the nodes after it. The
// node named by From sets it once it has run; a node reads it only when it
// names it among its needs, which is what makes the graph run the reader
// after the producer.
type Value[T any] struct {
	from, what string
	v          T
	set        bool
}

// NewValue returns the value the node named from will set; what says what
// it is, for the plan and the docs.
func NewValue[T any](from, what string) *Value[T] { return &Value[T]{from: from, what: what} }

// From names the node that sets the value.
func (v *Value[T]) From() string { return v.from }

// What says what the value is.
func (v *Value[T]) What() string { return v.what }

// Ready says whether the value has been set.
func (v *Value[T]) Ready() bool { return v.set }

// Set hands the value on; its node calls it once, when it has run.
func (v *Value[T]) Set(x T) { v.v, v.set = x, true }

// Get returns the value. Reading it before its node ran is a bug in the
// build's node table (a need left out), not an input error: it panics.
func (v *Value[T]) Get() T {
	if !v.set {
		panic("step: value of " + v.from + " read before " + v.from + " ran")
	}
	return v.v
}

// Handover is a Value of any type, as a node's needs list it.
type Handover interface {
	From() string
	What() string
	Ready() bool
}
