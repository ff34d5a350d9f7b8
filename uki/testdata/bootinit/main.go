// Command bootinit is the /init of the initrd used by the uki package's QEMU
// boot tests: it proves the UKI's kernel reached user space with the UKI's
// initrd, reports what Secure Boot and measured boot tests check, then
// powers the machine off so QEMU exits.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

func main() {
	console, err := os.OpenFile("/dev/console", os.O_WRONLY, 0)
	if err != nil {
		console = os.Stdout
	}
	// The command line the kernel got, which must be the UKI's .cmdline.
	_ = syscall.Mount("proc", "/proc", "proc", 0, "")
	_ = os.MkdirAll("/sys", 0o755)
	_ = syscall.Mount("sysfs", "/sys", "sysfs", 0, "")
	_ = syscall.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	cmdline, _ := os.ReadFile("/proc/cmdline")
	fmt.Fprintf(console, "\nuki-boot-ok pid=%d cmdline=%q secureboot=%s pcr11=%s\n",
		os.Getpid(), cmdline, secureBoot(), pcr11())
	console.Sync()
	time.Sleep(100 * time.Millisecond) // let the serial line drain
	syscall.Sync()
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Fprintf(console, "poweroff: %v\n", err)
	}
	select {}
}

// secureBoot is the firmware's SecureBoot variable as the kernel's EFI stub
// read it and logged it ("secureboot: Secure boot enabled"): efivarfs is a
// module in Debian's kernel, which this initrd does not carry.
func secureBoot() string {
	f, err := os.OpenFile("/dev/kmsg", os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	buf := make([]byte, 8192)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if errors.Is(err, syscall.EPIPE) { // a record was overwritten
				continue
			}
			return "unknown"
		}
		switch rec := string(buf[:n]); {
		case strings.Contains(rec, "Secure boot enabled"):
			return "enabled"
		case strings.Contains(rec, "Secure boot disabled"):
			return "disabled"
		}
	}
}

// pcr11 is the TPM's PCR 11 (SHA-256 bank), which nothing but systemd-stub
// extended this early.
func pcr11() string {
	b, err := os.ReadFile("/sys/class/tpm/tpm0/pcr-sha256/11")
	if err != nil {
		return "none"
	}
	return strings.ToLower(strings.TrimSpace(string(b)))
}
