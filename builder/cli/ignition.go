package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/ignition"
)

func init() {
	extraCommands = append(extraCommands, newIgnition)
}

// newIgnition is `builder ignition`: node configs for hypervisor images.
func newIgnition(stdout, stderr io.Writer) *cobra.Command {
	c := &cobra.Command{
		Use:   "ignition",
		Short: "Produce and check node configs (ignition) for the hypervisor image",
	}
	example := &cobra.Command{
		Use:   "example",
		Short: "Print a complete example node config (placeholder values) to edit",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := ignition.Generate(ignition.Example())
			if err != nil {
				return err
			}
			_, err = stdout.Write(b)
			return err
		},
	}
	validate := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a node config: valid ignition (spec <= 3.3.0) carrying configuration only",
		Long: `Validate parses FILE ("-" for stdin) with ignition's config packages and
flags what belongs in the image instead: files under /usr, /opt and the
other image-owned trees, executables, whole systemd units (drop-ins,
enabled and mask are fine), embedded blobs over 64 KiB, unverified
downloads, and disk or kernel-argument sections the in-memory node does not
apply. Exit code 1 lists every finding.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var raw []byte
			var err error
			if args[0] == "-" {
				raw, err = io.ReadAll(os.Stdin)
			} else {
				raw, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			warnings, err := ignition.Validate(raw)
			for _, w := range warnings {
				fmt.Fprintf(stderr, "warning: %s\n", w)
			}
			if err != nil {
				return fmt.Errorf("%s:\n%w", args[0], err)
			}
			fmt.Fprintf(stdout, "%s: ok\n", args[0])
			return nil
		},
	}
	c.AddCommand(example, validate)
	return c
}
