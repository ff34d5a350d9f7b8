package debpkg

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// controlDeb writes a package whose control.tar.gz holds the headers
// given (empty regular files), compressed as a package from anywhere may
// be, and returns its path.
func controlDeb(t *testing.T, n int, name func(i int) string) string {
	t.Helper()
	var ctl bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&ctl, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	for i := range n {
		if err := tw.WriteHeader(&tar.Header{Name: name(i), Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.WriteString(arMagic)
	for _, m := range []struct{ name, data string }{{"debian-binary", "2.0\n"}, {"control.tar.gz", ctl.String()}, {"data.tar", ""}} {
		fmt.Fprintf(&b, "%-16s%-12s%-6s%-6s%-8s%-10d`\n", m.name, "0", "0", "0", "100644", len(m.data))
		b.WriteString(m.data)
		if len(m.data)%2 == 1 {
			b.WriteString("\n")
		}
	}
	p := filepath.Join(t.TempDir(), "many.deb")
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries: a package of %d bytes", n, b.Len())
	return p
}

// TestControlBounds: a control archive is bounded in entries and in the
// bytes of their names, not only of their contents. Empty files cost
// nothing against maxControl and a name can be a MiB (a PAX record):
// unbounded, a 1 MB package made readControl keep 200,000 entries (and
// Control write as many files), one of 110 KB 100 MiB of names.
func TestControlBounds(t *testing.T) {
	for _, tc := range []struct {
		name string
		deb  func(t *testing.T) string
		want string
	}{
		{"5,000 empty files", func(t *testing.T) string {
			return controlDeb(t, 5_000, func(i int) string { return fmt.Sprintf("./f%07d", i) })
		}, "more than 1024 entries"},
		{"70 names of a MiB", func(t *testing.T) string {
			return controlDeb(t, 70, func(i int) string { return fmt.Sprintf("./%04d%s", i, strings.Repeat("n", 1<<20-64)) })
		}, "more than 67108864 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deb := tc.deb(t)
			files, _, err := readControl(deb)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("readControl: %d files, %v; want an error about %s", len(files), err, tc.want)
			}
		})
	}
}
