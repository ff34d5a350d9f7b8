package qemu

import (
	"fmt"
	"path/filepath"
)

// Args returns QEMU's arguments for cfg; the vars file is where the
// per-VM copy of OVMF's variable store is, in the VM's own directory
// (which also holds the QMP socket).
func (cfg *Config) Args(varsFile string) []string {
	args := cfg.machineArgs()
	if cfg.NoReboot {
		args = append(args, "-no-reboot")
	}
	if cfg.Monitor {
		args = append(args, "-qmp", "unix:"+qmpSocket(filepath.Dir(varsFile))+",server=on,wait=off")
	}
	if cfg.Paused {
		args = append(args, "-S")
	}
	args = append(args, cfg.firmwareArgs(varsFile)...)
	if cfg.TPMSocket != "" {
		args = append(args,
			"-chardev", "socket,id=chrtpm,path="+cfg.TPMSocket,
			"-tpmdev", "emulator,id=tpm0,chardev=chrtpm",
			"-device", "tpm-tis,tpmdev=tpm0")
	}
	if cfg.Kernel != "" {
		args = append(args, "-kernel", cfg.Kernel)
		if cfg.Initrd != "" {
			args = append(args, "-initrd", cfg.Initrd)
		}
		if cfg.Append != "" {
			args = append(args, "-append", cfg.Append)
		}
	}
	order := &bootOrder{from: cfg.BootFrom, next: 1}
	args = append(args, cfg.diskArgs(order)...)
	args = append(args, cfg.cdromArgs(order)...)
	args = append(args, cfg.netArgs(order)...)
	return append(args, cfg.ExtraArgs...)
}

// machineArgs are the machine, its memory, CPUs and console.
func (cfg *Config) machineArgs() []string {
	mem := cfg.MemoryMB
	if mem == 0 {
		mem = 1024
	}
	cpus := cfg.CPUs
	if cpus == 0 {
		cpus = 1
	}
	machine := "q35,accel=tcg"
	if cfg.SecureBoot {
		machine = "q35,smm=on,accel=tcg"
	}
	if cfg.Machine != "" {
		machine = cfg.Machine + ",accel=tcg"
	}
	arm := cfg.Arch == "arm64"
	if arm {
		machine = "virt,accel=tcg"
	}
	args := []string{
		"-machine", machine,
		"-m", fmt.Sprint(mem),
		"-smp", fmt.Sprint(cpus),
		"-display", "none",
		"-monitor", "none",
		"-serial", "stdio",
	}
	if arm {
		// pauth-impdef: pointer authentication with QEMU's own cheap
		// hash, not QARMA: the same guest, several times faster under TCG.
		args = append(args, "-cpu", "max,pauth-impdef=on")
	}
	return args
}

// firmwareArgs are the UEFI firmware's code and variable store.
func (cfg *Config) firmwareArgs(varsFile string) []string {
	if !cfg.UEFI {
		return nil
	}
	var args []string
	code := OVMFCode
	if cfg.Arch == "arm64" {
		code = AAVMFCode
	}
	if cfg.SecureBoot {
		// Only SMM code may write the flash: the OS cannot rewrite
		// the key variables behind the firmware's back.
		code = OVMFCodeSecureBoot
		args = append(args, "-global", "driver=cfi.pflash01,property=secure,value=on")
	}
	return append(args,
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+code,
		"-drive", "if=pflash,format=raw,unit=1,file="+varsFile,
	)
}

// bootOrder hands out bootindex properties: with a boot order, every
// bootable device gets one, the chosen device 0, the others after it in
// the order they are added (disks, CD-ROM, NIC). Only the -device form
// takes bootindex.
type bootOrder struct {
	from BootDevice
	next int
}

// index is d's ",bootindex=N" ("" without a boot order); first: d is
// the first device of its kind, the one booted when from is d.
func (o *bootOrder) index(d BootDevice, first bool) string {
	if o.from == "" {
		return ""
	}
	if d == o.from && first {
		return ",bootindex=0"
	}
	o.next++
	return fmt.Sprintf(",bootindex=%d", o.next-1)
}

func (cfg *Config) diskArgs(order *bootOrder) []string {
	var args []string
	for i, d := range cfg.Disks {
		serial := ""
		if i < len(cfg.DiskSerials) && cfg.DiskSerials[i] != "" {
			serial = ",serial=" + cfg.DiskSerials[i]
		}
		if cfg.BootFrom == "" && serial == "" {
			args = append(args, "-drive", fmt.Sprintf("if=virtio,format=raw,index=%d,file=%s", i, d))
			continue
		}
		args = append(args, "-drive", fmt.Sprintf("if=none,id=disk%d,format=raw,file=%s", i, d),
			"-device", fmt.Sprintf("virtio-blk-pci,drive=disk%d%s%s", i, serial, order.index(BootFromDisk, i == 0)))
	}
	return args
}

func (cfg *Config) cdromArgs(order *bootOrder) []string {
	switch {
	case cfg.CDROM == "":
		return nil
	case cfg.Arch == "arm64":
		// virt has no IDE: the CD is a SCSI CD on virtio-scsi, which
		// AAVMF and Debian's arm64 kernel drive.
		return []string{"-device", "virtio-scsi-pci,id=scsi0",
			"-drive", "if=none,id=cd0,media=cdrom,readonly=on,format=raw,file=" + cfg.CDROM,
			"-device", "scsi-cd,drive=cd0,bus=scsi0.0" + order.index(BootFromCDROM, true)}
	case cfg.BootFrom == "":
		return []string{"-drive", "media=cdrom,readonly=on,format=raw,file=" + cfg.CDROM}
	default:
		return []string{"-drive", "if=none,id=cd0,media=cdrom,readonly=on,format=raw,file=" + cfg.CDROM,
			"-device", "ide-cd,drive=cd0" + order.index(BootFromCDROM, true)}
	}
}

func (cfg *Config) netArgs(order *bootOrder) []string {
	if cfg.Net == nil {
		return []string{"-nic", "none"}
	}
	// -netdev/-device rather than -nic: only -device takes romfile.
	netdev := "user,id=n0"
	if cfg.Net.TFTPDir != "" {
		netdev += ",tftp=" + cfg.Net.TFTPDir
	}
	if cfg.Net.BootFile != "" {
		netdev += ",bootfile=" + cfg.Net.BootFile
	}
	for _, f := range cfg.Net.HostForwards {
		netdev += ",hostfwd=" + f
	}
	dev := "virtio-net-pci,netdev=n0"
	switch {
	case cfg.Net.NoROM:
		dev += ",romfile="
	case cfg.Net.ROMFile != "":
		dev += ",romfile=" + cfg.Net.ROMFile
	}
	dev += order.index(BootFromNet, true) + ",id=" + NICID
	args := []string{"-netdev", netdev, "-device", dev}
	if cfg.Net.HTTPBootOnly {
		args = append(args,
			"-fw_cfg", "name=opt/org.tianocore/IPv4PXESupport,string=n",
			"-fw_cfg", "name=opt/org.tianocore/IPv6PXESupport,string=n",
		)
	}
	return args
}
