// Package pid1 is the initrd's init: PID 1 of the initramfs. In memory mode
// it takes the read-only root image from the initrd, a partition or a URL
// (package netconf: DHCPv4, SLAAC or DHCPv6; fetch.go: a verified download
// into RAM),
// attaches it to a loop device, lays a tmpfs overlay over it at /sysroot,
// binds the persisted paths from the data partition over it (persist.go)
// and switches into it, executing /sbin/init. In install mode (install.go;
// choosing, classifying and writing the disk in package initrd/disk,
// partition tables in initrd/gpt) it writes the disk image to the selected
// disk, keeping the data partition, and reboots.
// Its kernel command line is defined in docs/cmdline.md.
//
// Every failure prints "osb-init: FATAL: <reason>" on the console and then
// waits forever, repeating the reason, instead of exiting (which would make
// the kernel panic with a message that does not say why); with
// osb.fatal=reboot:SECONDS it counts down and reboots instead, so that an
// unattended server retries a transient failure.
package pid1

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/initrd/disk"
	"github.com/ironcore-dev/os-builder/initrd/layout"
)

// Paths of the init's own; those it shares with the builder are in package
// initrd/layout.
const (
	// LowerDir and OverlayDir hold the read-only root and the tmpfs with
	// the overlay's upper and work directories. They live under /run, which
	// moves into the final root, so they stay visible there.
	LowerDir   = "/run/osb/lower"
	OverlayDir = "/run/osb/overlay"
	// SystemInit is what runs after the switch.
	SystemInit = "/sbin/init"
)

// DeviceWait is how long the init waits for a root device named by label or
// partition name to appear: storage drivers probe asynchronously, and slow
// controllers (RAID, USB, some NVMe) can take tens of seconds.
var DeviceWait = 60 * time.Second

const logPrefix = "osb-init: "

type initProcess struct {
	debug   bool
	cmdline string      // the kernel command line merged with the image's own (MergeCmdline)
	onFatal FatalPolicy // osb.fatal, once the command line is read
}

func (i *initProcess) logf(format string, a ...any) {
	fmt.Fprintf(os.Stdout, logPrefix+format+"\n", a...)
}

func (i *initProcess) debugf(format string, a ...any) {
	if i.debug {
		i.logf(format, a...)
	}
}

// Main runs the init. It never returns: it either executes the system's
// init or stays in the emergency loop.
func Main() {
	if os.Getpid() != 1 {
		// Refuse to run anywhere else: the switch deletes the files of the
		// root file system it runs from.
		fmt.Fprintln(os.Stderr, logPrefix+"must run as PID 1 of an initramfs; refusing to run")
		os.Exit(2)
	}
	i := &initProcess{}
	err := i.run()
	fatal(err, i.onFatal)
}

// fatal prints the reason and never returns: it stays, repeating the
// reason so that it can be read from a console attached late, or reboots
// as p says.
func fatal(err error, p FatalPolicy) {
	if err == nil {
		err = errors.New("init returned without switching root")
	}
	msg := logPrefix + "FATAL: " + err.Error() + "\n"
	if _, werr := os.Stdout.WriteString(msg); werr != nil {
		if c, cerr := os.OpenFile("/dev/console", os.O_WRONLY|unix.O_NOCTTY, 0); cerr == nil {
			c.WriteString(msg)
			c.Close()
		}
	}
	if k, kerr := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0); kerr == nil {
		k.WriteString("<2>" + strings.TrimSuffix(msg, "\n"))
		k.Close()
	}
	if p.Reboot {
		if rerr := rebootAfter(p.Delay); rerr != nil {
			msg += logPrefix + "FATAL: " + rerr.Error() + "; staying\n"
			os.Stdout.WriteString(msg)
		}
	}
	for {
		time.Sleep(30 * time.Second)
		os.Stdout.WriteString(msg)
	}
}

// rebootAfter counts down on the console, syncs and reboots; it returns
// only when the reboot fails.
func rebootAfter(delay time.Duration) error {
	secs := int64(delay / time.Second)
	fmt.Fprintf(os.Stdout, logPrefix+"rebooting in %d s (osb.fatal=reboot:%d)\n", secs, secs)
	for left := secs; left > 0; left-- {
		if left != secs && (left%10 == 0 || left <= 5) {
			fmt.Fprintf(os.Stdout, logPrefix+"rebooting in %d s\n", left)
		}
		time.Sleep(time.Second)
	}
	os.Stdout.WriteString(logPrefix + "rebooting now\n")
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		return fmt.Errorf("reboot: %w", err)
	}
	return errors.New("reboot returned")
}

func (i *initProcess) run() error {
	start := time.Now()
	if err := mountEarly(); err != nil {
		return err
	}
	if err := setupConsole(); err != nil {
		return err
	}
	if err := checkInitramfs(); err != nil {
		return err
	}
	raw, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return fmt.Errorf("read kernel command line: %w", err)
	}
	own, err := readImageCmdline(layout.CmdlinePath)
	if err != nil {
		return err
	}
	var fromImage []string
	i.cmdline, fromImage = MergeCmdline(own, string(raw))
	cfg, err := ParseCmdline(i.cmdline)
	i.onFatal = cfg.Fatal // a bad command line follows osb.fatal too
	if err != nil {
		if len(fromImage) > 0 {
			err = fmt.Errorf("%w (with %s from the image's %s)", err, strings.Join(fromImage, " "), layout.CmdlinePath)
		}
		return err
	}
	i.debug = cfg.Debug
	if len(fromImage) > 0 {
		// The loader named none of these keys: a loader with a command
		// line of its own (boot-operator's iPXE script) keeps them.
		i.logf("command line: %s from the image (%s)", strings.Join(fromImage, " "), layout.CmdlinePath)
	}
	cfg.ResolveRoot(initrdRoot() != "")
	i.logf("starting: mode=%s root=%s", cfg.Mode, cfg.Root)

	if err := i.loadModules(layout.ModuleListPath); err != nil {
		return err
	}
	switch cfg.Mode {
	case ModeMemory:
		if err := i.memoryMode(&cfg); err != nil {
			return err
		}
	case ModeInstall:
		return i.installMode(&cfg)
	default:
		return fmt.Errorf("unknown mode %q", cfg.Mode)
	}
	i.logf("root ready after %v; switching to %s", time.Since(start).Round(time.Millisecond), SystemInit)
	return switchRoot(layout.SysrootDir, SystemInit, os.Args[1:])
}

// memoryMode assembles /sysroot: the read-only root image with a tmpfs
// overlay on top, and the persisted paths bound over it.
func (i *initProcess) memoryMode(cfg *Config) error {
	src, err := i.findRoot(cfg)
	if err != nil {
		return err
	}
	i.debugf("root image: %s", src)
	lower, err := mountRootLayers(src, LowerDir)
	if err != nil {
		return err
	}
	if err := mountOverlay(lower, OverlayDir, layout.SysrootDir); err != nil {
		return err
	}
	rootDev := ""
	if cfg.Root.Kind == RootLabel || cfg.Root.Kind == RootPartLabel {
		rootDev = src
	}
	return i.setupPersist(cfg, rootDev, layout.SysrootDir)
}

// initrdRoot is the root the initrd carries, "" when it has none.
func initrdRoot() string {
	for _, p := range []string{layout.RootLayersDir, layout.RootImagePath} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// findRoot returns the file or block device holding the root image.
func (i *initProcess) findRoot(cfg *Config) (string, error) {
	r := cfg.Root
	switch r.Kind {
	case RootInitrd:
		src := initrdRoot()
		if src == "" {
			return "", fmt.Errorf("osb.root=initrd but the initrd has neither %s nor %s", layout.RootLayersDir, layout.RootImagePath)
		}
		return src, nil
	case RootLabel, RootPartLabel:
		i.logf("waiting up to %v for %s", DeviceWait, r)
		return disk.WaitForBlockDevice(disk.DeviceRef{Kind: disk.RefKind(r.Kind), Value: r.Value}, DeviceWait)
	case RootURL:
		if err := i.setupNetwork(i.cmdline, r.Value); err != nil {
			return "", err
		}
		return i.fetchRoot(r.Value, cfg.RootSHA256)
	}
	return "", fmt.Errorf("osb.root: unknown source %q", r.Kind)
}
