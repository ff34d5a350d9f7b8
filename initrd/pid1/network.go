package pid1

import (
	"github.com/ironcore-dev/os-builder/initrd/cmdline"
	"github.com/ironcore-dev/os-builder/initrd/netconf"
)

// setupNetwork configures one NIC (package netconf), the one BOOTIF names
// first, with an address of the family serverURL's host needs.
func (i *initProcess) setupNetwork(line, serverURL string) error {
	return netconf.Setup(netconf.BootMAC(cmdline.Split(line)), netconf.FamilyOf(serverURL), i.logf)
}
