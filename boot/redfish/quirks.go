package redfish

import (
	"slices"
	"strings"
)

// Quirks are the vendor differences the client papers over. They come from
// the table below, keyed by Manufacturer, and from what the BMC advertises
// (allowable values), which wins where it says something.
type Quirks struct {
	// VirtualMediaTarget is the BootSourceOverrideTarget that boots the
	// virtual CD. Standard: Cd.
	VirtualMediaTarget string
	// SendOverrideMode says whether to send BootSourceOverrideMode=UEFI with
	// every override: "always", "never", or "" = only if the BMC reports
	// the property at all (BMCs without it reject it as unknown).
	SendOverrideMode string
	// NoContinuous: BootSourceOverrideEnabled=Continuous is refused; the
	// client sends Once instead, and the driver re-applies it on each boot
	// (NetworkBootAlways) or clears the override (pin disk).
	NoContinuous bool
}

// quirkTable: one row per vendor, with the reason, so it stays reviewable.
var quirkTable = []struct {
	Manufacturer string
	Quirks       Quirks
	Why          string
}{
	{"Supermicro", Quirks{VirtualMediaTarget: "UsbCd", SendOverrideMode: "always"},
		"the virtual CD is attached as a USB CD and is booted with UsbCd, not Cd; the override only sticks with the mode in the same PATCH"},
}

// QuirksFor returns the table's quirks for a manufacturer (case-insensitive
// prefix match, "Supermicro" matches "Supermicro Computer Inc."), with
// standard defaults for everything the table does not set.
func QuirksFor(manufacturer string) Quirks {
	q := Quirks{VirtualMediaTarget: "Cd"}
	for _, row := range quirkTable {
		if strings.HasPrefix(strings.ToLower(manufacturer), strings.ToLower(row.Manufacturer)) {
			q = row.Quirks
			if q.VirtualMediaTarget == "" {
				q.VirtualMediaTarget = "Cd"
			}
		}
	}
	return q
}

// refine adjusts table quirks with what the BMC advertises.
func (q Quirks) refine(allowedTargets, allowedEnabled []string) Quirks {
	if len(allowedTargets) > 0 && !slices.Contains(allowedTargets, q.VirtualMediaTarget) {
		for _, t := range []string{"Cd", "UsbCd"} {
			if slices.Contains(allowedTargets, t) {
				q.VirtualMediaTarget = t
				break
			}
		}
	}
	if len(allowedEnabled) > 0 && !slices.Contains(allowedEnabled, "Continuous") {
		q.NoContinuous = true
	}
	return q
}

// toVendor maps a plan target to the vendor's spelling; fromVendor back.
func (q Quirks) toVendor(target string) string {
	if target == "Cd" {
		return q.VirtualMediaTarget
	}
	return target
}

func (q Quirks) fromVendor(target string) string {
	if target == q.VirtualMediaTarget {
		return "Cd"
	}
	return target
}
