package qemutier

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/ironcore-dev/os-builder/redfishemu"
)

// CLI is the QEMU tier as a redfishemu.Tier: `redfish-emulator --qemu ...`.
type CLI struct {
	enabled  bool
	cfg      Config
	seedDisk string
}

// Flags adds the --qemu flags.
func (c *CLI) Flags(fs *flag.FlagSet) {
	fs.BoolVar(&c.enabled, "qemu", false, "back the system with a real QEMU (OVMF, TCG) VM whose boot device follows the emulator's state")
	fs.StringVar(&c.cfg.Dir, "qemu-dir", "redfishemu-qemu", "the VM's state: disk.raw (kept across power cycles), downloaded media, console.log")
	fs.StringVar(&c.seedDisk, "qemu-seed-disk", "", "copy this disk image to the VM's disk at start (an installed OS)")
	fs.StringVar(&c.cfg.PXEBootFile, "qemu-pxe-bootfile", "", "iPXE script URL the emulated DHCP hands out on Pxe boots")
	fs.IntVar(&c.cfg.MemoryMB, "qemu-memory", DefaultMemoryMB, "guest RAM in MiB")
	fs.IntVar(&c.cfg.HTTPBootMemoryMB, "qemu-http-memory", DefaultHTTPBootMemoryMB, "guest RAM in MiB for UEFI HTTP boots (the UKI is loaded into RAM)")
}

// Attach starts the machine when --qemu is set.
func (c *CLI) Attach(_ context.Context, o *redfishemu.Options, stderr io.Writer) (func(), error) {
	if !c.enabled {
		return nil, nil
	}
	c.cfg.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	m, err := New(c.cfg)
	if err != nil {
		return nil, err
	}
	if c.seedDisk != "" {
		if err := m.SeedDisk(c.seedDisk); err != nil {
			m.Close()
			return nil, err
		}
	}
	m.Attach(o)
	fmt.Fprintf(stderr, "qemu tier: disk %s, console %s\n", m.DiskPath(), m.ConsoleLog())
	return m.Close, nil
}
