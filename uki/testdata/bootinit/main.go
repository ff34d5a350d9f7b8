// Command bootinit is the /init of the initrd used by the uki package's QEMU
// boot test: it proves the UKI's kernel reached user space with the UKI's
// initrd, then powers the machine off so QEMU exits.
package main

import (
	"fmt"
	"os"
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
	cmdline, _ := os.ReadFile("/proc/cmdline")
	fmt.Fprintf(console, "\nuki-boot-ok pid=%d cmdline=%q\n", os.Getpid(), cmdline)
	console.Sync()
	time.Sleep(100 * time.Millisecond) // let the serial line drain
	syscall.Sync()
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Fprintf(console, "poweroff: %v\n", err)
	}
	select {}
}
