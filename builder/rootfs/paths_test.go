package rootfs

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/recipe"
)

// hostTree is a stand-in for the build host: an image tree at
// host/work/rootfs shaped like Debian's (/var/run -> /run), a layer
// repository at host/repo, and host/outside with a sentinel no step may
// touch.
type hostTree struct {
	host, root, repo, sentinel string
	hostFiles                  map[string]string // name in outside/ -> content
}

func newHostTree(t *testing.T) *hostTree {
	t.Helper()
	h := &hostTree{host: t.TempDir()}
	h.root = filepath.Join(h.host, "work/rootfs")
	h.repo = filepath.Join(h.host, "repo")
	h.sentinel = filepath.Join(h.host, "outside/sentinel")
	for _, d := range []string{"run", "var", "etc", "usr/lib/systemd/system", "boot"} {
		buildertest.Must(t, os.MkdirAll(filepath.Join(h.root, d), 0o755))
	}
	buildertest.Must(t, os.Symlink("/run", filepath.Join(h.root, "var/run")))
	buildertest.Must(t, os.MkdirAll(filepath.Join(h.repo, "units"), 0o755))
	buildertest.Must(t, os.MkdirAll(filepath.Dir(h.sentinel), 0o755))
	h.hostFile(t, "sentinel", "host secret")
	return h
}

// hostFile puts a file that must stay as it is into outside/.
func (h *hostTree) hostFile(t *testing.T, name, content string) string {
	t.Helper()
	if h.hostFiles == nil {
		h.hostFiles = map[string]string{}
	}
	h.hostFiles[name] = content
	p := filepath.Join(filepath.Dir(h.sentinel), name)
	buildertest.Must(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// untouched fails if anything under host/outside changed.
func (h *hostTree) untouched(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Dir(h.sentinel))
	buildertest.Must(t, err)
	var names, want []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	for n, content := range h.hostFiles {
		want = append(want, n)
		p := filepath.Join(filepath.Dir(h.sentinel), n)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
			t.Errorf("host file %s: %v %v", p, fi, err)
		} else if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("host file %s now holds %q", p, b)
		}
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("host directory outside the image now holds %v, want %v", names, want)
	}
}

// recipe returns a one-layer recipe over the repository.
func (h *hostTree) recipe(l recipe.Layer) *recipe.Recipe {
	l.Name = "evil"
	l.Path = filepath.Join(h.repo, "layer.yaml")
	return &recipe.Recipe{Path: filepath.Join(h.repo, "recipe.yaml"), UnitsDir: "units", Resolved: []*recipe.Layer{&l}}
}

func (h *hostTree) repoFile(t *testing.T, name, content string) {
	t.Helper()
	buildertest.Must(t, os.MkdirAll(filepath.Dir(filepath.Join(h.repo, name)), 0o755))
	buildertest.Must(t, os.WriteFile(filepath.Join(h.repo, name), []byte(content), 0o644))
}

func readIn(t *testing.T, root, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, name))
	if err != nil {
		t.Fatalf("%s in the image: %v", name, err)
	}
	return string(b)
}

// TestFileDestinationResolvesInsideImage: a destination through the image's
// own absolute symlink lands where the link points inside the image, as in
// a chroot, not on the host's /run.
func TestFileDestinationResolvesInsideImage(t *testing.T) {
	h := newHostTree(t)
	h.repoFile(t, "foo", "layer file")
	name := "osb-paths-test-" + filepath.Base(h.host)
	s := &assembleStep{r: h.recipe(recipe.Layer{Files: []recipe.File{{Source: "foo", Destination: "/var/run/" + name, Mode: "0640"}}})}
	if err := s.applyFiles(context.Background(), buildertest.OpenRoot(t, h.root)); err != nil {
		t.Fatal(err)
	}
	if got := readIn(t, h.root, "run/"+name); got != "layer file" {
		t.Errorf("run/%s holds %q", name, got)
	}
	if fi, _ := os.Stat(filepath.Join(h.root, "run", name)); fi == nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode: %v", fi)
	}
	if _, err := os.Lstat("/run/" + name); err == nil {
		os.Remove("/run/" + name)
		t.Errorf("the file was written to the host's /run")
	}
	if fi, err := os.Lstat(filepath.Join(h.root, "var/run")); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("the image's /var/run symlink was replaced: %v %v", fi, err)
	}
	h.untouched(t)
}

// TestLayerSymlinkThenFileInside: a layer ships a symlink out of the tree,
// then a file "inside" it. The file lands inside the image.
func TestLayerSymlinkThenFileInside(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target func(h *hostTree) string // the shipped symlink's target
		dest   func(h *hostTree) string // the second file's destination
		lands  func(h *hostTree) string // where it must land, inside the root
	}{
		{"relative up",
			func(h *hostTree) string { return "../../.." },
			func(h *hostTree) string { return "/etc/x/outside/sentinel" },
			func(h *hostTree) string { return "outside/sentinel" }},
		{"deep relative up",
			func(h *hostTree) string { return "../../../../../../../../../../.." },
			func(h *hostTree) string { return "/etc/x" + h.sentinel },
			func(h *hostTree) string { return h.sentinel }},
		{"slash",
			func(h *hostTree) string { return "/" },
			func(h *hostTree) string { return "/etc/x" + h.sentinel },
			func(h *hostTree) string { return h.sentinel }},
		{"absolute host dir", // exists inside the image too
			func(h *hostTree) string {
				buildertest.Must(t, os.MkdirAll(filepath.Join(h.root, filepath.Dir(h.sentinel)), 0o755))
				return filepath.Dir(h.sentinel)
			},
			func(h *hostTree) string { return "/etc/x/sentinel" },
			func(h *hostTree) string { return h.sentinel }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostTree(t)
			target := tc.target(h)
			buildertest.Must(t, os.Symlink(target, filepath.Join(h.repo, "link")))
			h.repoFile(t, "y", "layer file")
			s := &assembleStep{r: h.recipe(recipe.Layer{Files: []recipe.File{
				{Source: "link", Destination: "/etc/x"},
				{Source: "y", Destination: tc.dest(h)},
			}})}
			if err := s.applyFiles(context.Background(), buildertest.OpenRoot(t, h.root)); err != nil {
				t.Fatal(err)
			}
			if l, err := os.Readlink(filepath.Join(h.root, "etc/x")); err != nil || l != target {
				t.Errorf("etc/x: %q %v, want the layer's symlink as shipped", l, err)
			}
			if got := readIn(t, h.root, tc.lands(h)); got != "layer file" {
				t.Errorf("%s holds %q", tc.lands(h), got)
			}
			h.untouched(t)
		})
	}
}

// TestUnitInstallValuesArePlainNames: Alias=, WantedBy=, RequiredBy= make
// links under the image's /etc/systemd/system; a value with "/" or ".."
// used to remove and replace files anywhere on the host.
func TestUnitInstallValuesArePlainNames(t *testing.T) {
	for _, tc := range []struct{ install, want string }{
		{"Alias=../../../../../outside/sentinel", `evil.service:4: Alias=../../../../../outside/sentinel: "../../../../../outside/sentinel" is not a plain unit name: it contains ".."`},
		{"Alias=../../../../x", `evil.service:4: Alias=../../../../x: "../../../../x" is not a plain unit name`},
		{"WantedBy=../../../../../outside/sentinel", `evil.service:4: WantedBy=../../../../../outside/sentinel:`},
		{"RequiredBy=multi-user.target " + "/x.target", `evil.service:4: RequiredBy=/x.target: "/x.target" is not a plain unit name: '/' is not allowed`},
		{"WantedBy=a/b.target", `'/' is not allowed`},
		{"UpheldBy=..target", `it contains ".."`},
		{"Also=../other.service", `Also=../other.service`},
		{"Alias=other.socket", `Alias=other.socket: an alias of evil.service must end in .service`},
		{"WantedBy=multi-user", `"multi-user" is not a unit name (like foo.target)`},
	} {
		t.Run(tc.install, func(t *testing.T) {
			h := newHostTree(t)
			h.repoFile(t, "units/evil.service", "[Unit]\nDescription=x\n[Install]\n"+tc.install+"\n")
			s := &assembleStep{r: h.recipe(recipe.Layer{Units: []recipe.Unit{{Name: "evil.service", Enable: true}}})}
			err := s.applyUnits(buildertest.OpenRoot(t, h.root))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v\nwant it to contain %s", err, tc.want)
			}
			h.untouched(t)
		})
	}
}

// TestUnitEnableLinks: the links `systemctl enable` would make, inside the
// image even when /etc/systemd/system is a symlink out of it.
func TestUnitEnableLinks(t *testing.T) {
	h := newHostTree(t)
	h.repoFile(t, "units/good.service", "[Unit]\nDescription=x\n\n[Install]\n# a comment\nWantedBy=multi-user.target \\\n  sockets.target\nRequiredBy=a.target\nUpheldBy=b.target\nAlias=better.service\nAlso=other.service\n")
	buildertest.Must(t, os.MkdirAll(filepath.Join(h.root, "etc/systemd"), 0o755))
	// A layer replaced /etc/systemd/system by a link to the host's copy.
	buildertest.Must(t, os.Symlink(filepath.Dir(h.sentinel), filepath.Join(h.root, "etc/systemd/system")))
	buildertest.Must(t, os.MkdirAll(filepath.Join(h.root, filepath.Dir(h.sentinel)), 0o755))
	s := &assembleStep{r: h.recipe(recipe.Layer{Units: []recipe.Unit{{Name: "good.service", Enable: true}}})}
	if err := s.applyUnits(buildertest.OpenRoot(t, h.root)); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(h.root, filepath.Dir(h.sentinel))
	for _, l := range []string{"multi-user.target.wants/good.service", "sockets.target.wants/good.service",
		"a.target.requires/good.service", "b.target.upholds/good.service", "better.service"} {
		if got, err := os.Readlink(filepath.Join(dir, l)); err != nil || got != "/usr/lib/systemd/system/good.service" {
			t.Errorf("%s: %q %v", l, got, err)
		}
	}
	if got := readIn(t, h.root, "usr/lib/systemd/system/good.service"); !strings.Contains(got, "Alias=better.service") {
		t.Errorf("unit file: %q", got)
	}
	h.untouched(t)
}

// TestBinaryUnderSymlinkedDir: a go:/oci: binary bound for a directory the
// image (or a layer) made a symlink is installed where the link points
// inside the image.
func TestBinaryUnderSymlinkedDir(t *testing.T) {
	h := newHostTree(t)
	buildertest.Must(t, os.MkdirAll(filepath.Join(h.root, "usr/local"), 0o755))
	buildertest.Must(t, os.Symlink("../../../..", filepath.Join(h.root, "usr/local/bin")))
	bin := filepath.Join(h.host, "tool")
	buildertest.Must(t, os.WriteFile(bin, []byte("\x7fELF binary"), 0o644))
	err := installBinaries(buildertest.OpenRoot(t, h.root), []step.Binary{
		{Src: bin, Dest: "/usr/local/bin/outside/sentinel", Step: "go:example.com/tool"},
		{Src: bin, Dest: "/var/run/bin/tool", Step: "oci:example.com/img@sha256:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"outside/sentinel", "run/bin/tool"} {
		if got := readIn(t, h.root, p); got != "\x7fELF binary" {
			t.Errorf("%s: %q", p, got)
		}
		if fi, _ := os.Stat(filepath.Join(h.root, p)); fi == nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v", p, fi)
		}
	}
	h.untouched(t)
}

// TestLiftStaysInsideImage: the kernel, os-release and module files are
// read inside the image; an absolute symlink to a host path cannot lift a
// host file into the artifacts.
func TestLiftStaysInsideImage(t *testing.T) {
	const kver = "6.1.0-test"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, h *hostTree)
		want  string
	}{
		{"kernel is an absolute link out", func(t *testing.T, h *hostTree) {
			buildertest.Must(t, os.Symlink(h.sentinel, filepath.Join(h.root, "boot/vmlinuz-"+kver)))
		}, "kernel " + kver + ": open " + "ROOT:/boot/vmlinuz-" + kver + ": no such file or directory"},
		{"boot is a relative link out", func(t *testing.T, h *hostTree) {
			buildertest.Must(t, os.Remove(filepath.Join(h.root, "boot")))
			buildertest.Must(t, os.Symlink("../../outside", filepath.Join(h.root, "boot")))
			h.hostFile(t, "vmlinuz-"+kver, "host secret")
		}, "no such file or directory"},
		{"os-release is an absolute link out", func(t *testing.T, h *hostTree) {
			buildertest.Must(t, os.WriteFile(filepath.Join(h.root, "boot/vmlinuz-"+kver), []byte("kernel"), 0o644))
			buildertest.Must(t, os.MkdirAll(filepath.Join(h.root, "usr/lib"), 0o755))
			buildertest.Must(t, os.Symlink(h.sentinel, filepath.Join(h.root, "usr/lib/os-release")))
		}, "os-release: open ROOT:/usr/lib/os-release: no such file or directory"},
		{"modules.dep names a host file", func(t *testing.T, h *hostTree) {
			buildertest.Must(t, os.WriteFile(filepath.Join(h.root, "boot/vmlinuz-"+kver), []byte("kernel"), 0o644))
			buildertest.Must(t, os.WriteFile(filepath.Join(h.root, "usr/lib/os-release"), []byte("ID=debian\n"), 0o644))
			buildertest.Must(t, os.WriteFile(filepath.Join(h.root, "lib/modules", kver, "modules.dep"),
				[]byte("../../../../../../outside/sentinel:\n"), 0o644))
		}, `"../../../../../../outside/sentinel" is not a path below the modules directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHostTree(t)
			buildertest.Must(t, os.MkdirAll(filepath.Join(h.root, "lib/modules", kver), 0o755))
			tc.setup(t, h)
			out := t.TempDir()
			// The kernel step's lift and assemble's, each on its own.
			root := buildertest.OpenRoot(t, h.root)
			s := &assembleStep{r: h.recipe(recipe.Layer{})}
			err := errors.Join(liftKernel(root, "amd64", []string{"sentinel"}, out), s.lift(root, out))
			want := strings.ReplaceAll(tc.want, "ROOT", h.root)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v\nwant it to contain %s", err, want)
			}
			filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), "host secret") {
					t.Errorf("%s holds the host's file", p)
				}
				return nil
			})
			h.untouched(t)
		})
	}
}

// TestRemoveMachineStateStaysInsideImage: the machine state globs run
// inside the image even when /etc/ssh is a link to a host directory.
func TestRemoveMachineStateStaysInsideImage(t *testing.T) {
	h := newHostTree(t)
	hostKey := h.hostFile(t, "ssh_host_rsa_key", "host key")
	buildertest.Must(t, os.Symlink(filepath.Dir(h.sentinel), filepath.Join(h.root, "etc/ssh")))
	inside := filepath.Join(h.root, filepath.Dir(h.sentinel), "ssh_host_ed25519_key")
	buildertest.Must(t, os.MkdirAll(filepath.Dir(inside), 0o755))
	buildertest.Must(t, os.WriteFile(inside, []byte("image key"), 0o600))
	buildertest.Must(t, os.Symlink("/etc/machine-id.real", filepath.Join(h.root, "etc/machine-id")))
	if err := removeMachineState(buildertest.OpenRoot(t, h.root)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(hostKey); err != nil {
		t.Errorf("the host's key went: %v", err)
	}
	if _, err := os.Stat(inside); err == nil {
		t.Error("the image's key is still there")
	}
	fi, err := os.Lstat(filepath.Join(h.root, "etc/machine-id"))
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 || fi.Mode().Perm() != 0o444 { // a new file
		t.Errorf("machine-id: %v %v", fi, err)
	}
	h.untouched(t)
}

// TestFileModesAsGitKeepsThem: a layer's files from a checkout made under
// umask 002 (0664, 0775) land with the modes git keeps (0644, 0755), and a
// layer's mode: still wins, so two clones give the same image.
func TestFileModesAsGitKeepsThem(t *testing.T) {
	h := newHostTree(t)
	h.repoFile(t, "tree/conf", "conf")
	h.repoFile(t, "tree/sub/tool", "#!/bin/sh\n")
	h.repoFile(t, "secret", "s")
	for name, mode := range map[string]os.FileMode{"tree": 0o775, "tree/sub": 0o775, "tree/conf": 0o664, "tree/sub/tool": 0o775, "secret": 0o664} {
		buildertest.Must(t, os.Chmod(filepath.Join(h.repo, name), mode))
	}
	s := &assembleStep{r: h.recipe(recipe.Layer{Files: []recipe.File{
		{Source: "tree", Destination: "/etc/osb-tree"},
		{Source: "secret", Destination: "/etc/osb-secret", Mode: "0600"},
	}})}
	if err := s.applyFiles(context.Background(), buildertest.OpenRoot(t, h.root)); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]os.FileMode{
		"etc/osb-tree": 0o755, "etc/osb-tree/sub": 0o755, "etc/osb-tree/conf": 0o644, "etc/osb-tree/sub/tool": 0o755, "etc/osb-secret": 0o600,
	} {
		if fi, err := os.Lstat(filepath.Join(h.root, name)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %o", name, fi, err, want)
		}
	}
}
