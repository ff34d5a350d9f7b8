package testutil

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
)

func TestRandomBytesDeterministic(t *testing.T) {
	a, b, c := RandomBytes(4096, 7), RandomBytes(4096, 7), RandomBytes(4096, 8)
	if !bytes.Equal(a, b) {
		t.Error("same seed, different bytes")
	}
	if bytes.Equal(a, c) {
		t.Error("different seeds, same bytes")
	}
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	p := WriteFile(t, dir, "abc", []byte("abc"))
	if got := string(ReadFile(t, p)); got != "abc" {
		t.Errorf("ReadFile = %q", got)
	}
	if got := string(ReadRange(t, p, 1, 2)); got != "bc" {
		t.Errorf("ReadRange = %q", got)
	}
	// sha256("abc")
	if got := FileSHA256(t, p); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("FileSHA256 = %s", got)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	AssertEmptyDir(t, empty)
	rec := &errorRecorder{TB: t}
	AssertEmptyDir(rec, dir)
	if len(rec.errs) != 2 || !strings.HasSuffix(rec.errs[0], ": abc") || !strings.HasSuffix(rec.errs[1], ": empty") {
		t.Errorf("AssertEmptyDir of a directory holding abc and empty: %q", rec.errs)
	}
	z := SparseZeros(t, dir, "zeros", 1<<20)
	if b := ReadFile(t, z); len(b) != 1<<20 || !bytes.Equal(b, make([]byte, 1<<20)) {
		t.Errorf("SparseZeros: %d bytes, not all zero", len(b))
	}
}

// errorRecorder is a testing.TB whose Errorf records the message instead
// of failing the test.
type errorRecorder struct {
	testing.TB
	errs []string
}

func (r *errorRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestGoldenMatches(t *testing.T) {
	p := WriteFile(t, t.TempDir(), "x.golden", []byte("want\n"))
	Golden(t, p, []byte("want\n"))
}

func TestRequireToolAndRun(t *testing.T) {
	sh := RequireTool(t, "sh")
	if got := string(Run(t, sh, "-c", "echo hi")); got != "hi\n" {
		t.Errorf("Run = %q", got)
	}
}

// TestMissingRule runs the helper tests below in a child process: outside
// CI a missing tool skips, in CI it fails.
func TestMissingRule(t *testing.T) {
	for _, tc := range []struct {
		ci       string
		wantFail bool
		want     string
	}{{"", false, "SKIP: TestHelperMissingTool"}, {"1", true, "needed in CI"}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperMissingTool$", "-test.v")
		cmd.Env = append(os.Environ(), "OSB_TESTUTIL_HELPER=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.wantFail || !strings.Contains(string(out), tc.want) {
			t.Errorf("CI=%q: err %v, want failure %v and %q in:\n%s", tc.ci, err, tc.wantFail, tc.want, out)
		}
	}
}

func TestHelperMissingTool(t *testing.T) {
	if os.Getenv("OSB_TESTUTIL_HELPER") == "" {
		t.Skip("helper for TestMissingRule")
	}
	RequireTool(t, "osb-no-such-tool")
	t.Error("RequireTool returned for a missing tool")
}

func TestCopyFloor(t *testing.T) {
	dir := t.TempDir()
	a := WriteFile(t, dir, "a", RandomBytes(3000, 1))
	b := WriteFile(t, dir, "b", RandomBytes(5000, 2))
	out := filepath.Join(dir, "out")
	res := testing.Benchmark(func(bb *testing.B) { CopyFloor(bb, out, a, b, a) })
	if res.N == 0 || res.Bytes != 11000 {
		t.Errorf("benchmark result %+v, want bytes 11000", res)
	}
	want := append(append(ReadFile(t, a), ReadFile(t, b)...), ReadFile(t, a)...)
	if !bytes.Equal(ReadFile(t, out), want) {
		t.Error("output is not the sources concatenated")
	}
}

// TestNewRegistry starts the real registry and checks it speaks the
// distribution API.
func TestNewRegistry(t *testing.T) {
	host := NewRegistry(t)
	resp, err := http.Get("http://" + host + "/v2/_catalog")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/_catalog: %s", resp.Status)
	}
}

// TestScratchDir: the directory is there to write in while the test runs
// and gone when it ends.
func TestScratchDir(t *testing.T) {
	var dir string
	t.Run("use", func(t *testing.T) {
		dir = ScratchDir(t)
		WriteFile(t, dir, "f", []byte("x"))
	})
	if dir == "" {
		t.Fatal("no directory")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after the test: %v, want it removed", dir, err)
	}
}

// TestFixTarChecksums: headers changed after writing fail tar's checksum
// test until FixTarChecksums, which follows the sizes from header to
// header (file data, a link and a directory in between) and stops at a
// size it cannot follow.
func TestFixTarChecksums(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "a", Typeflag: tar.TypeReg, Size: 600, Mode: 0o644},
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "a"},
		{Name: "d", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "b", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size))); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	headers := []int{0, 512 + 1024, 512 + 1024 + 512, 512 + 1024 + 1024} // a, l, d, b
	for _, off := range headers {
		b[off] = 'Z' // a name the checksums no longer cover
	}
	names := func() ([]string, error) {
		var got []string
		tr := tar.NewReader(bytes.NewReader(b))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				return got, nil
			}
			if err != nil {
				return got, err
			}
			got = append(got, h.Name)
		}
	}
	if _, err := names(); !errors.Is(err, tar.ErrHeader) {
		t.Fatalf("changed headers read with %v, want %v", err, tar.ErrHeader)
	}
	FixTarChecksums(b)
	if got, err := names(); err != nil || strings.Join(got, " ") != "Z Z Z Z" {
		t.Errorf("after the fix: %q, %v; want four entries named Z", got, err)
	}

	// A size that is no octal number stops the fix at its header: what
	// follows is left as it was.
	copy(b[124:136], "zzzzzzzzzzz\x00")
	b[headers[1]] = 'Y'
	rest := bytes.Clone(b[512:])
	FixTarChecksums(b)
	if !bytes.Equal(b[512:], rest) {
		t.Error("changed bytes past a size it cannot follow")
	}
}

// TestInterruptCLI interrupts a stand-in CLI that fetches from the
// registry until SIGINT, then exits 130 saying so.
func TestInterruptCLI(t *testing.T) {
	InterruptCLI(t, "OSB_TESTUTIL_INTERRUPT_CHILD", 130, "cli: interrupted",
		func(reg string) string { return "get http://" + reg + "/v2/" },
		func(args []string) int {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
			defer stop()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, args[1], nil)
			if err != nil {
				return 2
			}
			if _, err := http.DefaultClient.Do(req); err == nil || ctx.Err() == nil {
				return 1
			}
			fmt.Fprintln(os.Stderr, "cli: interrupted")
			return 130
		})
}

func TestLinuxImage(t *testing.T) {
	img := LinuxImage(t, empty.Image, "arm64", map[string]string{"osb.test": "x"})
	img = LinuxImage(t, img, "amd64", nil)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || cf.Config.Labels["osb.test"] != "x" {
		t.Errorf("config %s/%s labels %v, want linux/amd64 and the labels kept", cf.OS, cf.Architecture, cf.Config.Labels)
	}
}

// TestFreeAddr: the address is on loopback, and nothing answers there.
func TestFreeAddr(t *testing.T) {
	addr := FreeAddr(t)
	if host, _, err := net.SplitHostPort(addr); err != nil || host != "127.0.0.1" {
		t.Fatalf("FreeAddr = %q (%v)", addr, err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("something listens on %s", addr)
	}
}
