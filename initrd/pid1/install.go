package pid1

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ironcore-dev/os-builder/initrd/disk"
	"github.com/ironcore-dev/os-builder/initrd/gpt"
)

// Install mode writes the disk image to the target disk; package
// initrd/disk (install.go) says in which order, and what a disk must hold
// to be written.

// installMode installs the image and reboots; it returns only on failure.
func (i *initProcess) installMode(cfg *Config) error {
	if err := i.setupNetwork(i.cmdline, cfg.InstallImage); err != nil {
		return err
	}
	d, err := disk.SelectTarget(cfg.InstallTarget, DeviceWait, i.logf)
	if err != nil {
		return err
	}
	i.logf("install: target %s", d)
	// O_EXCL on a block device fails if it or a partition is mounted.
	f, ss, size, err := disk.Open(d.DevPath(), os.O_RDWR|unix.O_EXCL)
	if err != nil {
		return fmt.Errorf("install target, opened exclusively: %w", err)
	}
	defer f.Close()
	kind, table, reason, err := disk.Classify(f, ss, size)
	if err != nil {
		return fmt.Errorf("inspect %s: %w", d.DevPath(), err)
	}
	if err := disk.AdmitTarget(d.DevPath(), kind, reason, cfg.InstallWipe); err != nil {
		return err
	}
	var keep *gpt.Partition
	switch kind {
	case disk.Foreign:
		i.logf("install: %s is foreign (%s); overwriting it as osb.install.wipe=1 allows", d.DevPath(), reason)
	case disk.Ours:
		keep = table.ByName(disk.PartLabelData)
		if keep != nil {
			i.logf("install: %s has an os-builder layout; keeping its %s partition (LBA %d-%d)", d.DevPath(), disk.PartLabelData, keep.FirstLBA, keep.LastLBA)
		} else {
			i.logf("install: %s has an os-builder layout without %s", d.DevPath(), disk.PartLabelData)
		}
	default:
		i.logf("install: %s is blank", d.DevPath())
	}

	sink := disk.NewInstaller(f, ss, size, keep, i.logf)
	n, err := i.fetchVerified(cfg.InstallImage, cfg.InstallSHA256, sink)
	if err != nil {
		if sink.Table() != nil {
			return fmt.Errorf("%w; the disk's OS partitions are incomplete, so it does not boot (its %s partition, if any, is kept): run the installer again", err, disk.PartLabelData)
		}
		return fmt.Errorf("%w; nothing was written", err)
	}
	final := sink.Table()
	if final == nil {
		return fmt.Errorf("the image is only %d bytes, too short to be a disk image; nothing was written", n)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", d.DevPath(), err)
	}
	written, start := sink.Written()
	el := time.Since(start)
	if err := disk.WriteTable(f, final, size, true); err != nil {
		return err
	}
	i.logf("install: wrote %d bytes to %s in %v (%.1f MB/s)", written, d.DevPath(), el.Round(time.Millisecond), rate(written, el))
	if err := disk.RereadPartitions(f); err != nil {
		i.logf("WARNING: %v (the next boot reads the new table anyway)", err)
	}
	var names []string
	for _, p := range final.Partitions {
		names = append(names, fmt.Sprintf("%d:%s", p.Index, p.Name))
	}
	i.logf("install: done; %s partitions %s", d.DevPath(), strings.Join(names, " "))
	f.Close()
	unix.Sync()
	i.logf("install: rebooting")
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART); err != nil {
		return fmt.Errorf("reboot: %w", err)
	}
	return errors.New("reboot returned")
}
