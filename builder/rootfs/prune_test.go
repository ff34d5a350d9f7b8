package rootfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/recipe"
)

// pruneRecipe prunes with the defaults, an exclude and include of its own
// and a removal.
func pruneRecipe() *recipe.Recipe {
	return &recipe.Recipe{Prune: recipe.Prune{
		Defaults: true,
		Exclude:  []string{"/usr/bin/tool-*", "/usr/share/doc/*"},
		Include:  []string{"/usr/include/keep/*", "/usr/bin/tool-kept"},
		Remove:   []string{"/usr/lib/python3*/__pycache__"},
	}}
}

// pruneFiles are a package's files, as the defaults and pruneRecipe meet
// them.
var pruneFiles = []string{
	"usr/bin/tool", "usr/bin/tool-a", "usr/bin/tool-kept",
	"usr/include/x.h", "usr/include/sub/y.h", "usr/include/keep/k.h",
	"usr/lib/modules/6.1.0-1-amd64/kernel/sound/core/snd.ko",
	"usr/lib/modules/6.1.0-1-amd64/kernel/drivers/net/virtio_net.ko",
	"usr/lib/modules/6.1.0-1-amd64/kernel/drivers/net/wireless/ath/ath.ko",
	"usr/lib/modules/6.1.0-1-amd64/kernel/lib/test_bpf.ko",
	"usr/lib/firmware/iwlwifi-1.ucode", "usr/lib/firmware/bnx2/bnx2.fw",
	// Debian 12's kernel and firmware packages ship /lib.
	"lib/modules/6.1.0-2-amd64/kernel/sound/core/snd.ko",
	"lib/modules/6.1.0-2-amd64/kernel/drivers/net/virtio_net.ko",
	"lib/firmware/radeon/r100.bin", "lib/firmware/bnx2/bnx2-1.fw",
	"usr/share/doc/pkg/copyright", "usr/share/doc/pkg/README",
	"usr/lib/python3.11/os.py",
}

// TestPruneMatchesDpkg holds the bootstrap's prune against Debian's dpkg:
// a package of pruneFiles installed by dpkg with dpkgOptions keeps
// exactly what the extract hook leaves of the same files unpacked whole
// (the essential packages' way), dpkg's database still lists every file,
// and `dpkg --verify` names the left-out files, and only them, as missing.
func TestPruneMatchesDpkg(t *testing.T) {
	buildertest.RequireTools(t, "dpkg", "dpkg-deb")
	r := pruneRecipe()
	pkg := filepath.Join(t.TempDir(), "pkg")
	for _, f := range pruneFiles {
		buildertest.Must(t, os.MkdirAll(filepath.Join(pkg, filepath.Dir(f)), 0o755))
		buildertest.Must(t, os.WriteFile(filepath.Join(pkg, f), []byte(f), 0o644))
	}
	buildertest.Must(t, os.MkdirAll(filepath.Join(pkg, "DEBIAN"), 0o755))
	buildertest.Must(t, os.WriteFile(filepath.Join(pkg, "DEBIAN/control"),
		[]byte("Package: osb-prune\nVersion: 1.0\nArchitecture: all\nMaintainer: x <x@example.org>\nDescription: x\n"), 0o644))
	deb := filepath.Join(t.TempDir(), "osb-prune.deb")
	run(t, "dpkg-deb", "--root-owner-group", "-b", pkg, deb)

	// dpkg, filtering.
	installed := filepath.Join(t.TempDir(), "root")
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		buildertest.Must(t, os.MkdirAll(filepath.Join(installed, d), 0o755))
	}
	buildertest.Must(t, os.WriteFile(filepath.Join(installed, "var/lib/dpkg/status"), nil, 0o644))
	args := []string{"--root=" + installed, "--force-script-chrootless", "--force-unsafe-io"}
	for _, o := range dpkgOptions(r) {
		args = append(args, "--"+o)
	}
	run(t, "dpkg", append(args, "--install", deb)...)

	// Unpacked whole, then the hooks.
	hooked := filepath.Join(t.TempDir(), "root")
	miniTree(t, hooked)
	run(t, "dpkg-deb", "-x", deb, hooked)
	buildertest.Must(t, os.MkdirAll(filepath.Join(hooked, "usr/lib/python3.11/__pycache__/sub"), 0o755))
	buildertest.Must(t, os.WriteFile(filepath.Join(hooked, "usr/lib/python3.11/__pycache__/sub/os.pyc"), nil, 0o644))
	for _, h := range []string{pruneExtractHook(r), pruneRemoveHook(r)} {
		if out, err := exec.Command("sh", "-c", h, "exec", hooked).CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s\n%s", err, h, out)
		}
	}

	// dpkg's database lists every path of the package, kept or not.
	b, err := os.ReadFile(filepath.Join(installed, "var/lib/dpkg/info/osb-prune.list"))
	buildertest.Must(t, err)
	list := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, f := range pruneFiles {
		if !slices.Contains(list, "/"+f) {
			t.Errorf("dpkg's list lacks /%s", f)
		}
	}
	got, want := present(hooked, list), present(installed, list)
	if !slices.Equal(got, want) {
		t.Errorf("after the hooks:\n%s\ndpkg installed:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, keep := range []string{"/usr/bin/tool", "/usr/bin/tool-kept", "/usr/include/keep/k.h", "/usr/share/doc/pkg/copyright",
		"/usr/lib/modules/6.1.0-1-amd64/kernel/drivers/net/virtio_net.ko", "/usr/lib/modules/6.1.0-1-amd64/kernel/sound",
		"/usr/lib/firmware/bnx2/bnx2.fw", "/usr/lib/python3.11/os.py",
		"/lib/modules/6.1.0-2-amd64/kernel/drivers/net/virtio_net.ko", "/lib/firmware/bnx2/bnx2-1.fw"} {
		if !slices.Contains(want, keep) {
			t.Errorf("%s was left out", keep)
		}
	}
	if _, err := os.Lstat(filepath.Join(hooked, "usr/lib/python3.11/__pycache__")); err == nil {
		t.Error("prune.remove left __pycache__")
	}

	// --verify names the left-out paths missing, and nothing else.
	out, _ := exec.Command("dpkg", "--root="+installed, "--verify", "osb-prune").Output() // exits 1 on differences
	var missing, left []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			if f[0] != "missing" {
				t.Errorf("dpkg --verify: %s", line)
			}
			missing = append(missing, f[len(f)-1])
		}
	}
	for _, p := range list {
		if !slices.Contains(want, p) {
			left = append(left, p)
		}
	}
	sort.Strings(missing)
	sort.Strings(left)
	for _, p := range []string{"/lib/modules/6.1.0-2-amd64/kernel/sound/core/snd.ko", "/lib/firmware/radeon/r100.bin"} {
		if !slices.Contains(left, p) {
			t.Errorf("%s was kept", p)
		}
	}
	if len(left) < 8 || !slices.Equal(missing, left) {
		t.Errorf("dpkg --verify: missing\n%s\nwant the left-out paths\n%s", strings.Join(missing, "\n"), strings.Join(left, "\n"))
	}
}

// present is the paths of list that exist under root, sorted.
func present(root string, list []string) []string {
	var out []string
	for _, p := range list {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// TestBootstrapKeyPrune: the prune lists are the bootstrap's inputs (a
// changed list is another base), and a recipe without prune keys as before.
func TestBootstrapKeyPrune(t *testing.T) {
	key := func(r *recipe.Recipe) string {
		r.Base = recipe.Base{Distribution: "debian", Release: "bookworm", Architecture: "amd64"}
		in, err := (&bootstrapStep{r: r, packages: []string{"a"}}).Inputs()
		buildertest.Must(t, err)
		return in.Key()
	}
	plain := key(&recipe.Recipe{})
	pruned := key(pruneRecipe())
	more := pruneRecipe()
	more.Prune.Remove = append(more.Prune.Remove, "/x")
	if plain == pruned || pruned == key(more) {
		t.Errorf("keys: plain %s pruned %s more %s", plain, pruned, key(more))
	}
	in, err := (&bootstrapStep{r: &recipe.Recipe{}, packages: []string{"a"}}).Inputs()
	buildertest.Must(t, err)
	for _, i := range in {
		if strings.HasPrefix(i.Name, "prune") {
			t.Errorf("a recipe without prune has input %s", i.Name)
		}
	}
}
