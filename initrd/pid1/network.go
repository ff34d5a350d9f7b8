package pid1

import "github.com/ironcore-dev/os-builder/initrd/netconf"

// setupNetwork configures one NIC (package netconf), the one BOOTIF names
// first.
func (i *initProcess) setupNetwork(cmdline string) error {
	return netconf.Setup(netconf.BootMAC(SplitCmdline(cmdline)), i.logf)
}
