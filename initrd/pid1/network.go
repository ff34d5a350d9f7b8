package pid1

import "github.com/ironcore-dev/os-builder/initrd/netconf"

// setupNetwork configures one NIC (package netconf), the one BOOTIF names
// first, with an address of the family serverURL's host needs.
func (i *initProcess) setupNetwork(cmdline, serverURL string) error {
	return netconf.Setup(netconf.BootMAC(SplitCmdline(cmdline)), netconf.FamilyOf(serverURL), i.logf)
}
