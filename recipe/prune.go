package recipe

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Prune says which packaged files the image leaves out (mkosi's
// RemoveFiles=, Debian's dpkg path-exclude): a node booted in memory holds
// its whole root in RAM, which is RAM its VMs do not get.
type Prune struct {
	// Defaults turns on DefaultPruneExclude.
	Defaults bool `json:"defaults,omitempty"`
	// Exclude are dpkg path-exclude patterns: the files are listed in
	// dpkg's database but never unpacked, so `dpkg --verify` names exactly
	// these as missing and the package list stays the same.
	Exclude []string `json:"exclude,omitempty"`
	// Include are dpkg path-include patterns: a path an exclude matches
	// is kept when an include matches it too.
	Include []string `json:"include,omitempty"`
	// Remove are patterns deleted after every package is configured: for
	// what the packages' scripts generate (byte-compiled Python), which
	// dpkg does not know. A matched directory goes with its contents.
	Remove []string `json:"remove,omitempty"`
}

// DefaultPruneExclude is what prune.defaults leaves out, beyond the
// documentation, manual pages and translations no image gets (the
// bootstrap's own filter, which keeps the copyright files): what a server
// never reads. Headers and lintian overrides; the kernel modules, and their
// firmware, of hardware a server has no use for (sound, cameras and TV
// cards, desktop GPUs, Wi-Fi, Bluetooth, NFC, industrial sensors, staging
// drivers) and the kernel's self-tests. The disk, network, InfiniBand,
// USB, HID and server-GPU (ast, mgag200) drivers stay.
var DefaultPruneExclude = append([]string{
	"/usr/include/*",
	"/usr/src/linux-headers-*",
	"/usr/lib/*/perl/*/CORE/*.h",
	"/usr/share/lintian/*",
	"/usr/share/bug/*",
}, libPaths(
	"modules/*/kernel/sound/*",
	"modules/*/kernel/drivers/media/*",
	"modules/*/kernel/drivers/gpu/drm/amd/*",
	"modules/*/kernel/drivers/gpu/drm/i915/*",
	"modules/*/kernel/drivers/gpu/drm/nouveau/*",
	"modules/*/kernel/drivers/gpu/drm/radeon/*",
	"modules/*/kernel/drivers/net/wireless/*",
	"modules/*/kernel/net/wireless/*",
	"modules/*/kernel/net/mac80211/*",
	"modules/*/kernel/drivers/bluetooth/*",
	"modules/*/kernel/net/bluetooth/*",
	"modules/*/kernel/drivers/nfc/*",
	"modules/*/kernel/net/nfc/*",
	"modules/*/kernel/drivers/net/ieee802154/*",
	"modules/*/kernel/net/ieee802154/*",
	"modules/*/kernel/drivers/net/hamradio/*",
	"modules/*/kernel/drivers/iio/*",
	"modules/*/kernel/drivers/staging/*",
	"modules/*/kernel/drivers/comedi/*",
	"modules/*/kernel/drivers/isdn/*",
	"modules/*/kernel/drivers/input/touchscreen/*",
	"modules/*/kernel/lib/test_*",
	"firmware/amdgpu/*",
	"firmware/i915/*",
	"firmware/nvidia/*",
	"firmware/radeon/*",
	"firmware/iwlwifi-*",
	"firmware/ath*",
	"firmware/brcm/*",
	"firmware/rtlwifi/*",
	"firmware/rtw88/*",
	"firmware/rtw89/*",
	"firmware/mediatek/*",
	"firmware/intel/sof*",
)...)

// libPaths are rel under /lib and under /usr/lib: dpkg matches a filter
// against the path in the package, and Debian 12's kernel and firmware
// packages ship /lib/modules and /lib/firmware (merged /usr makes them
// /usr/lib's), Debian 13's /usr/lib/modules and /usr/lib/firmware.
func libPaths(rel ...string) []string {
	var out []string
	for _, r := range rel {
		out = append(out, "/lib/"+r, "/usr/lib/"+r)
	}
	return out
}

// PruneExclude is the recipe's effective dpkg path-exclude list: the
// defaults (when on), then its own, without repeats.
func (r *Recipe) PruneExclude() []string {
	var out []string
	if r.Prune.Defaults {
		out = append(out, DefaultPruneExclude...)
	}
	return compactKeepOrder(append(out, r.Prune.Exclude...))
}

// PruneInclude is the effective dpkg path-include list (the defaults need
// none: the bootstrap's own filter keeps the copyright files).
func (r *Recipe) PruneInclude() []string { return compactKeepOrder(r.Prune.Include) }

// PruneRemove is the effective list of post-install removals.
func (r *Recipe) PruneRemove() []string { return compactKeepOrder(r.Prune.Remove) }

func compactKeepOrder(s []string) []string {
	var out []string
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// prunePatternRE: an absolute path pattern of dpkg's glob characters. No
// spaces, quotes or shell syntax: the patterns go into dpkg's configuration
// (one per line) and into the bootstrap's hooks.
var prunePatternRE = regexp.MustCompile(`^/[A-Za-z0-9._+@*?\[\]/-]*$`)

func validatePrune(r *Recipe, doc *document, p *problems) {
	for _, f := range []struct {
		name string
		pats []string
	}{{"prune.exclude", r.Prune.Exclude}, {"prune.include", r.Prune.Include}, {"prune.remove", r.Prune.Remove}} {
		for i, pat := range f.pats {
			field := fmt.Sprintf("%s[%d]", f.name, i)
			switch {
			case !prunePatternRE.MatchString(pat):
				p.addf(doc, field, "%q is not an absolute path pattern (letters, digits, ._+@-/ and the globs * ? [ ])", pat)
			case slices.Contains(strings.Split(pat, "/"), ".."):
				p.addf(doc, field, "%q: .. is not allowed", pat)
			case pat == "/" || pat == "/*" || pat == "/**":
				p.addf(doc, field, "%q would leave nothing", pat)
			}
		}
	}
}
