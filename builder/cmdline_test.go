package builder

import (
	"testing"

	"github.com/ironcore-dev/os-builder/builder/rootfs"
	"github.com/ironcore-dev/os-builder/recipe"
)

// TestCmdlineBytes: the command line the builder writes (the cmdline
// file and the UKIs' .cmdline) and the osb.* words the initrds carry are
// byte for byte what they are for these recipes (the strings were taken
// from the builder before package initrd/cmdline; it passes on both).
func TestCmdlineBytes(t *testing.T) {
	for _, tc := range []struct {
		kernel     string
		persist    [][]string // per layer
		required   bool
		want       string
		wantInitrd string
	}{
		{kernel: "console=ttyS0 quiet", want: "console=ttyS0 quiet"},
		{kernel: " console=ttyS0  osb.debug osb.fatal=reboot:30 ", persist: [][]string{{"/var/lib/b"}, {"/etc/a", "/var/lib/b"}}, required: true,
			want:       "console=ttyS0 osb.debug osb.fatal=reboot:30 osb.persist=/etc/a,/var/lib/b osb.persist.required=1",
			wantInitrd: "osb.debug osb.fatal=reboot:30 osb.persist=/etc/a,/var/lib/b osb.persist.required=1"},
		{persist: [][]string{{"/var/lib/libvirt"}}, want: "osb.persist=/var/lib/libvirt", wantInitrd: "osb.persist=/var/lib/libvirt"},
		{persist: [][]string{{}}, required: true, want: "osb.persist.required=1", wantInitrd: "osb.persist.required=1"},
	} {
		r := &recipe.Recipe{Kernel: recipe.Kernel{Cmdline: tc.kernel}, PersistRequired: tc.required}
		for _, p := range tc.persist {
			r.Resolved = append(r.Resolved, &recipe.Layer{Persist: p})
		}
		b := &buildRun{r: r}
		if got := b.cmdline(); got != tc.want {
			t.Errorf("kernel %q, persist %q: cmdline %q, want %q", tc.kernel, tc.persist, got, tc.want)
		}
		if got := rootfs.InitrdCmdline(b.cmdline()); got != tc.wantInitrd {
			t.Errorf("kernel %q, persist %q: initrd's words %q, want %q", tc.kernel, tc.persist, got, tc.wantInitrd)
		}
	}
}
