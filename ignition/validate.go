package ignition

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"path"
	"sort"
	"strings"

	ignerrors "github.com/coreos/ignition/v2/config/shared/errors"
	"github.com/coreos/ignition/v2/config/util"
	"github.com/coreos/ignition/v2/config/v3_3"
	"github.com/coreos/ignition/v2/config/v3_3/types"
)

// MaxInlineBytes is the largest embedded file a node config may carry:
// configuration is small; anything larger is a program or data set that
// belongs in the image (or is fetched by the component itself).
const MaxInlineBytes = 64 << 10

// imageOwned are the trees the image owns. Writing there from a node
// config means shipping software by configuration.
var imageOwned = []string{"/usr", "/opt", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/etc/systemd/system-generators"}

// Finding is one problem in a node config.
type Finding struct {
	// Path locates it in the config, e.g. storage.files[2] (/usr/bin/x).
	Path    string
	Message string
}

func (f Finding) String() string { return f.Path + ": " + f.Message }

// Findings is every problem found; as an error it lists them all.
type Findings []Finding

func (fs Findings) Error() string {
	lines := make([]string, len(fs))
	for i, f := range fs {
		lines[i] = f.String()
	}
	return strings.Join(lines, "\n")
}

// Validate parses a node config with ignition's own config packages (spec
// 3.0 to 3.3, what the image's ignition 2.14 reads) and then applies the
// image's policy: configuration only. It returns ignition's warnings and a
// Findings error when the config is not acceptable.
func Validate(raw []byte) (warnings []string, err error) {
	v, _, verr := util.GetConfigVersion(raw)
	if verr == nil && v.Major == 3 && v.Minor > 3 {
		return nil, Findings{{Path: "ignition.version", Message: fmt.Sprintf("%s is newer than the image's ignition (2.14) reads: use %s or older", v, SpecVersion)}}
	}
	cfg, rpt, perr := v3_3.ParseCompatibleVersion(raw)
	if perr == nil {
		for _, e := range rpt.Entries {
			warnings = append(warnings, e.String())
		}
	}
	if perr != nil {
		if errors.Is(perr, ignerrors.ErrUnknownVersion) {
			return warnings, fmt.Errorf("ignition config: unknown or missing ignition.version (want 3.0.0 to %s): %w", SpecVersion, perr)
		}
		msg := perr.Error()
		if rpt.IsFatal() {
			msg += ":\n" + rpt.String()
		}
		return warnings, fmt.Errorf("ignition config: %s", strings.TrimSpace(msg))
	}
	if fs := Check(cfg); len(fs) > 0 {
		return warnings, fs
	}
	return warnings, nil
}

// Check applies the configuration-only policy to a parsed config.
func Check(c types.Config) Findings {
	var fs Findings
	flag := func(p, format string, args ...any) {
		fs = append(fs, Finding{Path: p, Message: fmt.Sprintf(format, args...)})
	}
	for i, f := range c.Storage.Files {
		p := fmt.Sprintf("storage.files[%d] (%s)", i, f.Path)
		if owned(f.Path) {
			flag(p, "%s belongs to the image: ship it in a recipe layer, not in the node config", under(f.Path))
		}
		if f.Mode != nil && *f.Mode&0o111 != 0 {
			flag(p, "executable (mode %04o): programs belong in the image; a node config carries configuration", *f.Mode)
		}
		if strings.HasPrefix(f.Path, "/etc/systemd/system/") && isUnitFile(f.Path) && !strings.Contains(path.Dir(f.Path), ".d") {
			flag(p, "a whole systemd unit: units belong in the image (units/); use systemd.units[].dropins or enabled/mask for an image unit")
		}
		for j, r := range append([]types.Resource{f.Contents}, f.Append...) {
			rp := p + ".contents"
			if j > 0 {
				rp = fmt.Sprintf("%s.append[%d]", p, j-1)
			}
			checkResource(r, rp, flag)
		}
	}
	for i, d := range c.Storage.Directories {
		if owned(d.Path) {
			flag(fmt.Sprintf("storage.directories[%d] (%s)", i, d.Path), "%s belongs to the image", under(d.Path))
		}
	}
	for i, l := range c.Storage.Links {
		if owned(l.Path) {
			flag(fmt.Sprintf("storage.links[%d] (%s)", i, l.Path), "%s belongs to the image", under(l.Path))
		}
	}
	if len(c.Storage.Disks)+len(c.Storage.Filesystems)+len(c.Storage.Raid)+len(c.Storage.Luks) > 0 {
		flag("storage", "disks, filesystems, raid and luks are not applied: the node runs from memory and ignition-apply runs only the fetch and files stages")
	}
	if len(c.KernelArguments.ShouldExist)+len(c.KernelArguments.ShouldNotExist) > 0 {
		flag("kernelArguments", "not applied: the kernel command line is part of the boot artifacts (recipe kernel.cmdline)")
	}
	for i, u := range c.Systemd.Units {
		p := fmt.Sprintf("systemd.units[%d] (%s)", i, u.Name)
		if u.Contents != nil {
			flag(p, "carries a whole unit: units belong in the image (units/); use dropins, enabled or mask for a unit the image ships")
		}
	}
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Path < fs[j].Path })
	return fs
}

func checkResource(r types.Resource, p string, flag func(string, string, ...any)) {
	if r.Source == nil {
		return
	}
	src := *r.Source
	u, err := url.Parse(src)
	if err != nil {
		return // ignition's own validation reports it
	}
	switch u.Scheme {
	case "data":
		n, err := dataLen(src)
		if err == nil && n > MaxInlineBytes {
			flag(p, "embeds %d bytes (limit %d): a large blob is a program or data set; put it in the image", n, MaxInlineBytes)
		}
	case "http", "https", "s3", "gs", "tftp":
		if r.Verification.Hash == nil {
			flag(p, "fetched from %s without verification.hash: pin what the node downloads", u.Redacted())
		}
	}
}

// dataLen is the decoded size of a data URL.
func dataLen(s string) (int, error) {
	meta, payload, ok := strings.Cut(strings.TrimPrefix(s, "data:"), ",")
	if !ok {
		return 0, fmt.Errorf("data URL without ','")
	}
	if strings.HasSuffix(meta, ";base64") {
		b, err := base64.StdEncoding.DecodeString(payload)
		return len(b), err
	}
	d, err := url.PathUnescape(payload)
	return len(d), err
}

func owned(p string) bool {
	return under(p) != ""
}

func under(p string) string {
	p = path.Clean(p)
	for _, o := range imageOwned {
		if p == o || strings.HasPrefix(p, o+"/") {
			return o
		}
	}
	return ""
}

func isUnitFile(p string) bool {
	switch path.Ext(p) {
	case ".service", ".socket", ".timer", ".path", ".mount", ".automount", ".target", ".swap", ".slice", ".scope":
		return true
	}
	return false
}
