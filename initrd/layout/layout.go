// Package layout holds the paths the builder and the init agree on: where
// the builder (package initrd, package builder) puts things in the initrd
// and where the init (package initrd/pid1) looks for them. It is its own
// package so that the builder can name them without linking the init and
// its network stack.
package layout

const (
	// RootImagePath is where the read-only root image sits in the initrd
	// for osb.root=initrd.
	RootImagePath = "/root.img"
	// RootLayersDir holds the root's layers in the initrd instead, one
	// image per file, bottom first by name. Each rides in its own cpio
	// segment, so the builder reuses the big base segment byte for byte.
	RootLayersDir = "/root.layers"
	// ModuleListPath lists the kernel modules to load, one absolute path
	// per line, in load order (dependencies first). Plain .ko files: the
	// builder decompresses them, so the kernel needs no module
	// decompression support.
	ModuleListPath = "/etc/osb-init/modules"
	// CmdlinePath holds the osb.* words of the image's own kernel command
	// line (the builder's cmdline file), one line. The init merges them
	// with /proc/cmdline, the loader's words winning key by key, so a
	// loader with a command line of its own (boot-operator's iPXE script)
	// keeps the image's persisted paths and policies (docs/cmdline.md).
	CmdlinePath = "/etc/osb-init/cmdline"
	// MaxCmdline bounds the file: the largest kernel command line of any
	// architecture the builder targets (arm64's COMMAND_LINE_SIZE).
	MaxCmdline = 4096
	// SysrootDir is where the final root is assembled before switching:
	// the builder creates the directory, the init mounts on it.
	SysrootDir = "/sysroot"
)
