package artifacts

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/builder/internal/buildertest"
	"github.com/ironcore-dev/os-builder/builder/step"
	"github.com/ironcore-dev/os-builder/internal/testutil"
	"github.com/ironcore-dev/os-builder/osimage"
	"github.com/ironcore-dev/os-builder/recipe"
	"github.com/ironcore-dev/os-builder/uki"
)

// TestManifestSecureBoot: the manifest says whether the UKI-bearing
// artifacts are signed, by which certificate, and whether they carry a
// PCR 11 signature; builds without them say nothing.
func TestManifestSecureBoot(t *testing.T) {
	testutil.RequireFiles(t, hostStub)
	assembled := t.TempDir()
	if err := os.WriteFile(filepath.Join(assembled, step.StubFile), testutil.ReadFile(t, hostStub), 0o644); err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	if err := uki.GenerateKey(keys, "manifest test"); err != nil {
		t.Fatal(err)
	}
	key, cert, err := uki.LoadSigner(filepath.Join(keys, uki.KeyFile), filepath.Join(keys, uki.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	fp := sha256.Sum256(cert.Raw)
	pxe := []osimage.Artifact{{Kind: osimage.KindKernel}, {Kind: osimage.KindInitrd}}
	for _, tc := range []struct {
		name   string
		arts   []osimage.Artifact
		signed bool
		want   *osimage.SecureBoot
	}{
		{"pxe only", pxe, true, nil},
		{"unsigned uki", append(pxe, osimage.Artifact{Kind: osimage.KindUKI}), false, &osimage.SecureBoot{Signed: false}},
		{"unsigned iso", []osimage.Artifact{{Kind: osimage.KindISO}}, false, &osimage.SecureBoot{Signed: false}},
		{"signed disk", []osimage.Artifact{{Kind: osimage.KindDisk}}, true, &osimage.SecureBoot{
			Signed: true, Certificate: "CN=manifest test", CertificateSHA256: hex.EncodeToString(fp[:]), PCRSignature: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg Config
			if tc.signed {
				cfg.Signer, cfg.Cert = key, cert
			}
			got := SecureBoot(cfg, step.Assembled{Dir: assembled}, tc.arts)
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSignedUKINeedsCmdline: a signed uki.efi (and the ISO's) always
// carries .cmdline; a recipe with an empty command line is refused before
// anything is built, naming kernel.cmdline, since without .cmdline
// systemd-stub takes the boot loader's line under Secure Boot. The UKI a
// signing build writes is checked with Debian's tools: objdump -h lists
// its .cmdline, sbverify accepts its signature.
func TestSignedUKINeedsCmdline(t *testing.T) {
	testutil.RequireFiles(t, hostStub)
	objdump, sbverify := testutil.RequireTool(t, "objdump"), testutil.RequireTool(t, "sbverify")
	keys := t.TempDir()
	buildertest.Must(t, uki.GenerateKey(keys, "cmdline test"))
	key, cert, err := uki.LoadSigner(filepath.Join(keys, uki.KeyFile), filepath.Join(keys, uki.CertFile))
	buildertest.Must(t, err)
	asm := t.TempDir()
	for name, data := range map[string][]byte{
		step.KernelImage:   []byte("MZ kernel"),
		step.KernelRelease: []byte("6.1.0-test\n"),
		step.OSReleaseFile: []byte("ID=debian\n"),
		step.StubFile:      testutil.ReadFile(t, hostStub),
		step.LayerImage:    []byte("hsqs layer"),
		"noroot.img":       []byte("init segment"),
	} {
		buildertest.Must(t, os.WriteFile(filepath.Join(asm, name), data, 0o644))
	}
	in := testInputs(step.Stack{Layers: []step.Layer{{Dir: asm, Name: step.TopLayer}}}, asm, asm, filepath.Join(asm, "noroot.img"))
	for _, tc := range []struct {
		name    string
		outputs []recipe.Output
		cmdline string
		signed  bool
		want    string // error; "" builds
	}{
		{"signed uki, empty cmdline", []recipe.Output{recipe.OutputUKI}, "", true, "kernel.cmdline"},
		{"signed iso, blank cmdline", []recipe.Output{recipe.OutputISO}, " ", true, "kernel.cmdline"},
		{"unsigned uki, empty cmdline", []recipe.Output{recipe.OutputUKI}, "", false, ""},
		{"signed uki", []recipe.Output{recipe.OutputUKI}, "console=ttyS0", true, ""},
		{"signed pxe, empty cmdline", []recipe.Output{recipe.OutputPXE}, "", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := recipe.Recipe{Outputs: tc.outputs}
			cfg := Config{Outputs: r.OutputSet(), Cmdline: tc.cmdline, Arch: "amd64", Name: "t", Version: "1", Builder: "b"}
			if tc.signed {
				cfg.Signer, cfg.Cert = key, cert
			}
			checkErr := cfg.CheckSigning()
			out := t.TempDir()
			_, err := writeAll(t.Context(), cfg, in, out)
			if tc.want != "" {
				for what, err := range map[string]error{"CheckSigning": checkErr, "writing": err} {
					if err == nil || !strings.Contains(err.Error(), tc.want) {
						t.Errorf("%s: err = %v, want a refusal naming %s", what, err, tc.want)
					}
				}
				return
			}
			buildertest.Must(t, checkErr)
			buildertest.Must(t, err)
			if !tc.signed || !cfg.Outputs[recipe.OutputUKI] {
				return
			}
			efi := filepath.Join(out, FileUKI)
			headers, err := exec.Command(objdump, "-h", efi).CombinedOutput()
			buildertest.Must(t, err)
			if !strings.Contains(string(headers), " .cmdline ") {
				t.Errorf("objdump -h %s lists no .cmdline:\n%s", FileUKI, headers)
			}
			if out, err := exec.Command(sbverify, "--cert", filepath.Join(keys, uki.CertFile), efi).CombinedOutput(); err != nil {
				t.Errorf("sbverify: %v\n%s", err, out)
			}
		})
	}
}
