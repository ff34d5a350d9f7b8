package osimage_test

import (
	"bytes"
	"debug/pe"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/uki"
)

// TestV2UKIKindAssembles reads the V2 UKI kind of real builds (the test
// image, amd64 and arm64) and makes a UKI of it as a V2 reader would:
// the stub layer is the build's stub.efi, a PE image of the manifest's
// architecture; stub + kernel + initrds + the config's cmdline and
// osRelease, joined by the uki package, give a PE whose .linux, .initrd
// and .cmdline are the layers and whose code is uki.efi's: the stub layer
// is the stub the build made uki.efi of. Sections are read with the Go
// standard library's PE reader, and on amd64 with objdump too.
func TestV2UKIKindAssembles(t *testing.T) {
	for _, tc := range []struct{ arch, env string }{
		{"amd64", testutil.TestOutputEnv},
		{"arm64", "OSB_TEST_ARM64_OUTPUT"},
	} {
		t.Run(tc.arch, func(t *testing.T) {
			t.Parallel()
			dir := testutil.Output(t, tc.env)
			m, err := osimage.ReadManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Architecture != tc.arch {
				t.Fatalf("%s=%s is a %s build", tc.env, dir, m.Architecture)
			}
			// The UKI kind alone: the Disk kind would convert disk.raw.
			only := *m
			only.Artifacts = slices.DeleteFunc(slices.Clone(m.Artifacts), func(a osimage.Artifact) bool {
				return !slices.Contains([]osimage.ArtifactKind{osimage.KindKernel, osimage.KindInitrd, osimage.KindStub}, a.Kind)
			})
			imgs, err := osimage.NewV2Images(dir, &only)
			if err != nil {
				t.Fatal(err)
			}
			if len(imgs) != 1 || imgs[0].Kind != osimage.V2UKI {
				t.Fatalf("V2 images %+v, want the UKI kind alone", imgs)
			}
			img := imgs[0].Image
			mf, err := img.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			if k, isV2, err := osimage.V2KindOf(mf); k != osimage.V2UKI || !isV2 || err != nil {
				t.Fatalf("V2KindOf: %s %v %v", k, isV2, err)
			}
			var kernel, stub []byte
			initrd, err := os.Create(filepath.Join(t.TempDir(), "initrd"))
			if err != nil {
				t.Fatal(err)
			}
			defer initrd.Close()
			var roles []string
			for _, l := range mf.Layers {
				switch l.MediaType {
				case osimage.V2MediaTypeKernel:
					kernel = readLayer(t, img, l)
					roles = append(roles, "kernel")
				case osimage.V2MediaTypeStub:
					stub = readLayer(t, img, l)
					roles = append(roles, "stub")
				default:
					copyLayer(t, img, l, initrd)
					roles = append(roles, "initrd")
				}
			}
			if got := strings.Join(slices.Compact(roles), " "); got != "kernel initrd stub" {
				t.Errorf("layer roles %q, want kernel, initrds, stub", got)
			}
			if file := readFile(t, filepath.Join(dir, "stub.efi")); !bytes.Equal(stub, file) {
				t.Fatal("the stub layer is not stub.efi")
			}
			sp, err := pe.NewFile(bytes.NewReader(stub))
			if err != nil {
				t.Fatalf("stub layer: %v", err)
			}
			if want := uki.MachineFor(m.Architecture); sp.Machine != want {
				t.Errorf("stub layer: PE machine %#x, %s is %#x", sp.Machine, m.Architecture, want)
			}
			t.Logf("%s: stub.efi %d bytes, PE machine %#x", tc.arch, len(stub), sp.Machine)

			raw, err := img.RawConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			var cfg osimage.V2Config
			if err := json.Unmarshal(raw, &cfg); err != nil {
				t.Fatal(err)
			}
			fi, err := initrd.Stat()
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "assembled.efi")
			err = uki.BuildFile(out, uki.Options{
				Stub: stub, Kernel: kernel, InitrdReader: io.NewSectionReader(initrd, 0, fi.Size()),
				Cmdline: cfg.Cmdline, OSRelease: cfg.OSRelease, Machine: uki.MachineFor(cfg.Architecture),
				SourceDateEpoch: m.SourceDateEpoch,
			})
			if err != nil {
				t.Fatal(err)
			}
			got := peSections(t, out)
			built := peSections(t, filepath.Join(dir, "uki.efi"))
			for _, name := range []string{".linux", ".initrd", ".cmdline", ".text"} {
				if got[name] == "" {
					t.Errorf("assembled UKI has no %s section", name)
				} else if got[name] != built[name] {
					t.Errorf("assembled UKI's %s differs from uki.efi's", name)
				}
			}
			if cmdline := sectionText(t, out, ".cmdline"); strings.TrimSpace(cmdline) != m.Cmdline {
				t.Errorf("assembled UKI: .cmdline %q, manifest.json says %q", cmdline, m.Cmdline)
			}
			if osrel := sectionText(t, out, ".osrel"); osrel != cfg.OSRelease || !strings.Contains(osrel, "ID=") {
				t.Errorf("assembled UKI: .osrel %q", osrel)
			}
			if tc.arch == "amd64" {
				// binutils reads x86-64 PE only.
				objdump := testutil.RequireTool(t, "objdump")
				hdrs, err := exec.Command(objdump, "-h", out).CombinedOutput()
				if err != nil {
					t.Fatalf("objdump -h: %v\n%s", err, hdrs)
				}
				for _, name := range []string{".linux", ".initrd", ".cmdline", ".osrel"} {
					if !strings.Contains(string(hdrs), " "+name+" ") {
						t.Errorf("objdump -h shows no %s:\n%s", name, hdrs)
					}
				}
			}
		})
	}
}

func readLayer(t *testing.T, img v1.Image, d v1.Descriptor) []byte {
	t.Helper()
	var b bytes.Buffer
	copyLayer(t, img, d, &b)
	return b.Bytes()
}

// copyLayer writes a layer's bytes, checked against its digest.
func copyLayer(t *testing.T, img v1.Image, d v1.Descriptor, w io.Writer) {
	t.Helper()
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h, n, err := v1.SHA256(io.TeeReader(rc, w))
	if err != nil {
		t.Fatal(err)
	}
	if h != d.Digest || n != d.Size {
		t.Fatalf("layer %s: read %s (%d bytes)", d.Digest, h, n)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// peSections digests a PE's sections by name, each cut to its virtual
// size (the initrd's is most of the file: not held in memory).
func peSections(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := pe.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	out := map[string]string{}
	for _, s := range f.Sections {
		h, _, err := v1.SHA256(io.LimitReader(s.Open(), int64(min(s.Size, s.VirtualSize))))
		if err != nil {
			t.Fatalf("%s section %s: %v", path, s.Name, err)
		}
		out[s.Name] = h.String()
	}
	return out
}

// sectionText is a small section's bytes, cut to its virtual size.
func sectionText(t *testing.T, path, name string) string {
	t.Helper()
	f, err := pe.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	s := f.Section(name)
	if s == nil {
		t.Fatalf("%s has no %s section", path, name)
	}
	data, err := s.Data()
	if err != nil {
		t.Fatalf("%s section %s: %v", path, name, err)
	}
	return string(data[:min(len(data), int(s.VirtualSize))])
}
