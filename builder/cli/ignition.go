package cli

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/ironcore-dev/os-builder/ignition"
	icli "github.com/ironcore-dev/os-builder/internal/cli"
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
	var asJSON bool
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
			if asJSON {
				return writeValidation(stdout, args[0], warnings, err)
			}
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
	icli.JSONFlag(validate, &asJSON)
	c.AddCommand(example, validate)
	return c
}

// validation is what `ignition validate --json` prints; with findings or
// an unparsable config it is printed and the exit code is still 1.
type validation struct {
	File     string    `json:"file"`
	OK       bool      `json:"ok"`
	Warnings []string  `json:"warnings"`
	Findings []finding `json:"findings"`
	Error    string    `json:"error,omitempty"`
}

type finding struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func writeValidation(w io.Writer, file string, warnings []string, err error) error {
	v := validation{File: file, OK: err == nil, Warnings: warnings, Findings: []finding{}}
	if v.Warnings == nil {
		v.Warnings = []string{}
	}
	var fs ignition.Findings
	switch {
	case errors.As(err, &fs):
		for _, f := range fs {
			v.Findings = append(v.Findings, finding{Path: f.Path, Message: f.Message})
		}
	case err != nil:
		v.Error = err.Error()
	}
	if werr := icli.WriteJSON(w, v); werr != nil {
		return werr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}
