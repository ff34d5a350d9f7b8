package pid1

import (
	"github.com/ironcore-dev/os-builder/initrd/cmdline"

	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/initrd/layout"
)

func TestMergeCmdline(t *testing.T) {
	for _, tc := range []struct {
		name, own, loader string
		want              string
		wantImage         []string
	}{
		{"no file", "", "console=ttyS0", "console=ttyS0", nil},
		{"loader names none", "osb.persist=/a osb.persist.required=1", "console=ttyS0 ip=any",
			"osb.persist=/a osb.persist.required=1 console=ttyS0 ip=any", []string{"osb.persist=/a", "osb.persist.required=1"}},
		{"loader wins its key", "osb.persist=/a osb.fatal=reboot:5", "osb.persist=/b",
			"osb.fatal=reboot:5 osb.persist=/b", []string{"osb.fatal=reboot:5"}},
		{"every occurrence dropped", "osb.persist=/a osb.persist=/c", "osb.persist=/b", "osb.persist=/b", nil},
		{"bare key counts", "osb.debug=0", "osb.debug", "osb.debug", nil},
		{"bare key in the image", "osb.debug", "x=1", "osb.debug x=1", []string{"osb.debug"}},
		{"image's other words ignored", "console=ttyS0 BOOTIF=01-aa-bb-cc-dd-ee-ff osb.persist=/a", "quiet",
			"osb.persist=/a quiet", []string{"osb.persist=/a"}},
		{"init's argv is not the loader's key", "osb.persist=/a", "quiet -- osb.persist=/b",
			"osb.persist=/a quiet -- osb.persist=/b", []string{"osb.persist=/a"}},
		{"image's -- ignored", "osb.persist=/a -- osb.debug", "", "osb.persist=/a ", []string{"osb.persist=/a"}},
		{"quoted value kept whole", `"osb.persist=/a b"`, "", `"osb.persist=/a b" `, []string{"osb.persist=/a b"}},
		{"image line with newline", "osb.persist=/a\n", "console=ttyS0\n", "osb.persist=/a console=ttyS0\n", []string{"osb.persist=/a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, image := MergeCmdline(tc.own, tc.loader)
			if got != tc.want || !reflect.DeepEqual(image, tc.wantImage) {
				t.Errorf("MergeCmdline(%q, %q) = %q, %q; want %q, %q", tc.own, tc.loader, got, image, tc.want, tc.wantImage)
			}
			// The merge keeps what cmdline.Split reads: the image's kept
			// words, then the loader's.
			if want := append(append([]string(nil), tc.wantImage...), cmdline.Split(tc.loader)...); !reflect.DeepEqual(cmdline.Split(got), want) && len(want) > 0 {
				t.Errorf("cmdline.Split(merged) = %q, want %q", cmdline.Split(got), want)
			}
		})
	}
}

// TestMergeOverridesParsed: what ParseCmdline makes of a merged line, for
// the parameters the boot-operator path loses.
func TestMergeOverridesParsed(t *testing.T) {
	own := "osb.persist=/var/lib/libvirt,/var/lib/libvirt-provider osb.persist.required=1 osb.fatal=reboot:30 osb.data=label:store"
	bootOperator := "initrd=initrd gl.ovl=/:tmpfs gl.url=http://x/image?imageName=a&version=1&layerDigest=sha256:00 gl.live=1 ip=any ignition.firstboot=1 console=ttyS0,115200"
	merged, _ := MergeCmdline(own, bootOperator)
	cfg, err := ParseCmdline(merged)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.Persist, []string{"/var/lib/libvirt", "/var/lib/libvirt-provider"}) || !cfg.PersistRequired ||
		cfg.Fatal.String() != "reboot:30" || cfg.Data.Value != "store" || cfg.Root.Kind != RootDefault {
		t.Errorf("config from %q: %+v", merged, cfg)
	}
	merged, _ = MergeCmdline(own, bootOperator+" osb.fatal=stay osb.persist.required=0")
	if cfg, err = ParseCmdline(merged); err != nil {
		t.Fatal(err)
	}
	if cfg.Fatal.Reboot || cfg.PersistRequired || len(cfg.Persist) != 2 {
		t.Errorf("loader's osb.fatal and osb.persist.required did not win: %+v", cfg)
	}
}

func TestReadImageCmdline(t *testing.T) {
	dir := t.TempDir()
	if got, err := readImageCmdline(filepath.Join(dir, "absent")); got != "" || err != nil {
		t.Errorf("absent file: %q, %v", got, err)
	}
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte("osb.persist=/a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readImageCmdline(ok); got != "osb.persist=/a\n" || err != nil {
		t.Errorf("ok file: %q, %v", got, err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, []byte("osb.persist=/"+strings.Repeat("a", layout.MaxCmdline)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readImageCmdline(big); err == nil || !strings.Contains(err.Error(), "more than 4096") || !strings.Contains(err.Error(), big) {
		t.Errorf("oversized file: %v", err)
	}
	if _, err := readImageCmdline(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

// TestMergeRuleInDocs checks docs/cmdline.md's statement of the merge rule
// and every row of its example table against MergeCmdline.
func TestMergeRuleInDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/cmdline.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	_, sec, ok := strings.Cut(doc, "\n## The image's own command line\n")
	if !ok {
		t.Fatal("docs/cmdline.md has no section \"The image's own command line\"")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	flat := strings.Join(strings.Fields(sec), " ")
	for _, want := range []string{
		"**Merge rule: the image's `osb.` words come first, then the loader's command line as it is; an image word whose key the loader's line names is dropped, so for every key the loader's value wins and a key only the image names keeps the image's value.**",
		"`" + layout.CmdlinePath + "`",
		"at most 4096 bytes",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("the section does not say %q", want)
		}
	}
	if layout.MaxCmdline != 4096 {
		t.Errorf("layout.MaxCmdline = %d, the doc says 4096", layout.MaxCmdline)
	}
	rows := 0
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| image's") {
			continue
		}
		cell := func(i int) string {
			c := strings.TrimSpace(cells[i])
			if c == "(none)" {
				return ""
			}
			return strings.Trim(c, "`")
		}
		rows++
		got, _ := MergeCmdline(cell(1), cell(2))
		if got != cell(3) {
			t.Errorf("doc row %q: MergeCmdline gives %q", line, got)
		}
	}
	if rows < 5 {
		t.Errorf("%d example rows in the doc's table, want at least 5", rows)
	}
}
