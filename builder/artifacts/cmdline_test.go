package artifacts

import "testing"

// TestDiskCmdlineBytes: the disk UKI's command line is byte for byte what
// it was before package initrd/cmdline (it passes on both).
func TestDiskCmdlineBytes(t *testing.T) {
	for in, want := range map[string]string{
		"":                                     "osb.root=partlabel:osb-root",
		"console=ttyS0 osb.persist=/var/lib/a": "osb.root=partlabel:osb-root console=ttyS0 osb.persist=/var/lib/a",
	} {
		if got := diskCmdline(in); got != want {
			t.Errorf("diskCmdline(%q) = %q, want %q", in, got, want)
		}
	}
}
