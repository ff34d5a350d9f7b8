// Package recipes holds the shipped recipes; its tests run the scripts
// their layers install, on the host, against fake system state.
package recipes

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// secureBootVar is the efivar file boot-report reads.
const secureBootVar = "firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"

// TestBootReport runs osb-boot-report's script with a fake sysfs
// (OSB_SYSFS) and fake systemctl and networkctl that report nothing: it
// prints its two lines and nothing on stderr, which the unit sends to the
// console too. Before, a machine without a TPM got the shell's "cannot
// open /sys/class/tpm/tpm0/pcr-sha256/11: No such file" next to the
// script's own "pcr11: no TPM": the redirection that hid errors came after
// the one that failed.
func TestBootReport(t *testing.T) {
	sh := testutil.RequireTool(t, "sh")
	for _, tool := range []string{"awk", "od", "tr"} {
		testutil.RequireTool(t, tool)
	}
	bin := t.TempDir()
	for _, tool := range []string{"systemctl", "networkctl"} {
		testutil.WriteFile(t, bin, tool, []byte("#!/bin/sh\nexit 0\n"))
		if err := os.Chmod(filepath.Join(bin, tool), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	efivar := func(v byte) []byte { return []byte{0x06, 0, 0, 0, v} } // attributes, then the value
	for _, tc := range []struct {
		name  string
		files map[string][]byte // under the fake sysfs; "" content: a directory
		want  string
	}{
		{"no UEFI, no TPM", nil, "secure boot: not UEFI; pcr11: no TPM"},
		{"UEFI without efivars, TPM without a SHA-256 bank", map[string][]byte{"firmware/efi": nil, "class/tpm/tpm0": nil}, "secure boot: unknown; pcr11: no TPM"},
		{"Secure Boot enabled, TPM", map[string][]byte{secureBootVar: efivar(1), "class/tpm/tpm0/pcr-sha256/11": []byte("0A1B2C3D4E5F\n")}, "secure boot: enabled; pcr11: 0a1b2c3d4e5f"},
		{"Secure Boot disabled, no TPM", map[string][]byte{secureBootVar: efivar(0)}, "secure boot: disabled; pcr11: no TPM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := t.TempDir()
			for p, b := range tc.files {
				p = filepath.Join(sys, p)
				dir := filepath.Dir(p)
				if b == nil {
					dir = p
				}
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if b != nil {
					if err := os.WriteFile(p, b, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			cmd := exec.Command(sh, "layers/files/ironcore/boot-report")
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "OSB_SYSFS="+sys)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("boot-report: %v\n%s%s", err, stdout.Bytes(), stderr.Bytes())
			}
			want := "osb-boot-report: reached multi-user.target; failed units: none; network: no Ethernet interface\n" +
				"osb-boot-report: " + tc.want + "\n"
			if stdout.String() != want {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout.String(), want)
			}
			if stderr.Len() > 0 {
				t.Errorf("stderr (the console): %s", strings.TrimSpace(stderr.String()))
			}
		})
	}
}
