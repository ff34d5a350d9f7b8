package testutil

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
	z := SparseZeros(t, dir, "zeros", 1<<20)
	if b := ReadFile(t, z); len(b) != 1<<20 || !bytes.Equal(b, make([]byte, 1<<20)) {
		t.Errorf("SparseZeros: %d bytes, not all zero", len(b))
	}
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
