package redfish

import (
	"context"
	"fmt"
	"net/http"
	"slices"

	"github.com/ironcore-dev/os-builder/boot"
)

type member struct {
	ID string `json:"@odata.id"`
}

type systemDoc struct {
	ID            string `json:"Id"`
	Manufacturer  string
	PowerState    string
	LastResetTime string
	Boot          struct {
		Enabled        string   `json:"BootSourceOverrideEnabled"`
		EnabledAllowed []string `json:"BootSourceOverrideEnabled@Redfish.AllowableValues"`
		Target         string   `json:"BootSourceOverrideTarget"`
		TargetAllowed  []string `json:"BootSourceOverrideTarget@Redfish.AllowableValues"`
		Mode           *string  `json:"BootSourceOverrideMode"`
		HTTPBootURI    string   `json:"HttpBootUri"`
	}
	VirtualMedia member
	Processors   member
	Actions      struct {
		Reset struct {
			Target string `json:"target"`
		} `json:"#ComputerSystem.Reset"`
	}
	Links struct {
		ManagedBy []member
	}
}

type mediaDoc struct {
	MediaTypes []string
	Inserted   bool
	Image      *string
	Actions    struct {
		Insert struct {
			Target     string   `json:"target"`
			ActionInfo string   `json:"@Redfish.ActionInfo"`
			Protocols  []string `json:"TransferProtocolType@Redfish.AllowableValues"`
			Methods    []string `json:"TransferMethod@Redfish.AllowableValues"`
		} `json:"#VirtualMedia.InsertMedia"`
		Eject struct {
			Target string `json:"target"`
		} `json:"#VirtualMedia.EjectMedia"`
	}
}

func (c *Client) discover(ctx context.Context, systemID string) error {
	var systems struct{ Members []member }
	if _, err := c.get(ctx, "/redfish/v1/Systems", &systems); err != nil {
		return fmt.Errorf("listing systems: %w", err)
	}
	var sys systemDoc
	for _, m := range systems.Members {
		if _, err := c.get(ctx, m.ID, &sys); err != nil {
			return fmt.Errorf("reading system %s: %w", m.ID, err)
		}
		if systemID == "" || sys.ID == systemID {
			c.systemPath = m.ID
			break
		}
	}
	if c.systemPath == "" {
		return fmt.Errorf("no system %q among %d systems", systemID, len(systems.Members))
	}
	c.resetTarget = sys.Actions.Reset.Target
	if c.resetTarget == "" {
		c.resetTarget = c.systemPath + "/Actions/ComputerSystem.Reset"
	}
	if len(sys.Links.ManagedBy) > 0 {
		c.managerPath = sys.Links.ManagedBy[0].ID
	}
	var mgr struct {
		Manufacturer string
		VirtualMedia member
	}
	if c.managerPath != "" {
		if _, err := c.get(ctx, c.managerPath, &mgr); err != nil {
			return fmt.Errorf("reading manager: %w", err)
		}
	}
	c.manufacturer = sys.Manufacturer
	if c.manufacturer == "" {
		c.manufacturer = mgr.Manufacturer
	}
	// Virtual media sits under the system on newer BMCs, the manager on older.
	for _, coll := range []string{sys.VirtualMedia.ID, mgr.VirtualMedia.ID} {
		if coll == "" || c.mediaPath != "" {
			continue
		}
		var vm struct{ Members []member }
		if _, err := c.get(ctx, coll, &vm); err != nil {
			if statusOf(err) == http.StatusNotFound {
				continue
			}
			return fmt.Errorf("listing virtual media: %w", err)
		}
		for _, m := range vm.Members {
			var md mediaDoc
			if _, err := c.get(ctx, m.ID, &md); err != nil {
				return fmt.Errorf("reading virtual media %s: %w", m.ID, err)
			}
			if slices.ContainsFunc(md.MediaTypes, func(t string) bool { return t == "CD" || t == "DVD" }) {
				c.mediaPath, c.insertTarget, c.ejectTarget = m.ID, md.Actions.Insert.Target, md.Actions.Eject.Target
				c.insertParams = insertParams{protocol: len(md.Actions.Insert.Protocols) > 0, method: len(md.Actions.Insert.Methods) > 0}
				if ai := md.Actions.Insert.ActionInfo; ai != "" && c.insertTarget != "" {
					c.insertParams.fromActionInfo(ctx, c, ai)
				}
				break
			}
		}
	}
	c.quirks = QuirksFor(c.manufacturer).refine(sys.Boot.TargetAllowed, sys.Boot.EnabledAllowed)
	c.modeReported = sys.Boot.Mode != nil
	c.caps = boot.Capabilities{Manufacturer: c.manufacturer, VirtualMediaCD: c.mediaPath != "", ContinuousSupported: !c.quirks.NoContinuous}
	for _, t := range sys.Boot.TargetAllowed {
		c.caps.AllowedTargets = append(c.caps.AllowedTargets, c.quirks.fromVendor(t))
	}
	if sys.Processors.ID != "" {
		is, err := c.instructionSet(ctx, sys.Processors.ID)
		if err != nil {
			return err
		}
		c.caps.InstructionSet = is
	}
	return nil
}

// maxProcessors bounds the Processors members read: sockets, GPUs, FPGAs
// of one system are a handful.
const maxProcessors = 64

// processorDoc is what instructionSet reads of a Processor.
type processorDoc struct {
	ProcessorType  string
	InstructionSet string
	Status         struct{ State string }
}

// instructionSet is the InstructionSet of the system's CPUs: the first
// Processors member that is a CPU (ProcessorType CPU or unset; GPUs, FPGAs
// and accelerators have their own), present (an empty socket is Status.State
// Absent) and reports one. ProcessorSummary has no InstructionSet in the
// DMTF schema, so the members are read. A system without a Processors
// collection (404) reports none.
func (c *Client) instructionSet(ctx context.Context, coll string) (string, error) {
	var procs struct{ Members []member }
	if _, err := c.get(ctx, coll, &procs); err != nil {
		if statusOf(err) == http.StatusNotFound {
			return "", nil
		}
		return "", fmt.Errorf("listing processors: %w", err)
	}
	if len(procs.Members) > maxProcessors {
		return "", fmt.Errorf("processors %s: %d members, more than %d", coll, len(procs.Members), maxProcessors)
	}
	for _, m := range procs.Members {
		var p processorDoc
		if _, err := c.get(ctx, m.ID, &p); err != nil {
			return "", fmt.Errorf("reading processor %s: %w", m.ID, err)
		}
		if (p.ProcessorType == "" || p.ProcessorType == "CPU") && p.Status.State != "Absent" && p.InstructionSet != "" {
			return p.InstructionSet, nil
		}
	}
	return "", nil
}

// Capabilities as discovered at Connect.
func (c *Client) Capabilities(ctx context.Context) (boot.Capabilities, error) {
	return c.caps, nil
}
