package debpkg

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// FuzzDeb: a package whose control archive and data member are anything.
// The ar framing and the tar checksums are made right, so the mutations
// reach the readers. Whatever the bytes: no panic; the filesystem tree of
// an uncompressed package is its data member as it is; the control files
// land in the directory named and nowhere else, as regular files.
func FuzzDeb(f *testing.F) {
	var ctl bytes.Buffer
	tw := tar.NewWriter(&ctl)
	for _, h := range []*tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "./control", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4},
		{Name: "./../escape", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "./link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
	} {
		tw.WriteHeader(h)
		if h.Size > 0 {
			tw.Write([]byte("x: y"))
		}
	}
	tw.Close()
	f.Add(ctl.Bytes(), []byte("data"), "")
	f.Add(ctl.Bytes()[:1024], []byte{}, ".xz")
	f.Add([]byte{}, []byte("\x28\xb5\x2f\xfd"), ".zst")
	f.Fuzz(func(t *testing.T, control, data []byte, comp string) {
		if len(comp) > 8 {
			return
		}
		control = bytes.Clone(control)
		testutil.FixTarChecksums(control)
		dir := testutil.ScratchDir(t)
		deb := filepath.Join(dir, "p.deb")
		var b bytes.Buffer
		b.WriteString(arMagic)
		for _, m := range []struct {
			name string
			data []byte
		}{{"debian-binary", []byte("2.0\n")}, {"control.tar", control}, {"data.tar" + comp, data}} {
			fmt.Fprintf(&b, "%-16s%-12s%-6s%-6s%-8s%-10d`\n", m.name, "0", "0", "0", "100644", len(m.data))
			b.Write(m.data)
			if len(m.data)%2 == 1 {
				b.WriteByte('\n')
			}
		}
		if err := os.WriteFile(deb, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		err := FsysTarfile(&out, deb)
		if comp == "" && (err != nil || !bytes.Equal(out.Bytes(), data)) {
			t.Fatalf("uncompressed data member: %v, %d bytes of %d", err, out.Len(), len(data))
		}
		if _, err := IsSplitPart(deb); err != nil {
			t.Fatalf("IsSplitPart: %v", err)
		}
		ctlDir := filepath.Join(dir, "ctl")
		if err := Control(deb, ctlDir); err != nil {
			return
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() != "p.deb" && e.Name() != "ctl" {
				t.Errorf("Control wrote %s beside its directory", e.Name())
			}
		}
		files, err := os.ReadDir(ctlDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range files {
			if !e.Type().IsRegular() {
				t.Errorf("Control made %s, a %v", e.Name(), e.Type())
			}
		}
	})
}
