package boot

// Override is a boot source override.
type Override struct {
	Target      string `json:"target"`
	Enabled     string `json:"enabled"`
	Mode        string `json:"mode,omitempty"` // "UEFI"; empty leaves the BMC's mode alone
	HTTPBootURI string `json:"httpBootUri,omitempty"`
}

// Redfish BootSourceOverrideTarget values the plan uses. Vendor spellings
// (Supermicro's UsbCd) are the BMC client's business, not the plan's.
const (
	TargetUefiHttp = "UefiHttp"
	TargetPxe      = "Pxe"
	TargetCd       = "Cd"
	TargetHdd      = "Hdd"
	TargetNone     = "None"
)

// Override enablement values (BootSourceOverrideEnabled).
const (
	EnabledOnce       = "Once"
	EnabledContinuous = "Continuous"
	EnabledDisabled   = "Disabled"
)
