package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

func TestReport(t *testing.T) {
	var out bytes.Buffer
	if err := report(&out, "testdata/run"); err != nil {
		t.Fatal(err)
	}
	testutil.Golden(t, "testdata/report.golden", out.Bytes())
}

// TestReportMissing: a run that stopped early has no go test log or boot
// log; the table still shows the phases that ran.
func TestReportMissing(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "phases"), []byte("setup 2 0\nvet 40 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := report(&out, dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "FAILED (exit 1)") || !strings.Contains(out.String(), "0 boots") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestReportBadLine(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "boots.jsonl"), []byte("{\"test\":\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := report(&bytes.Buffer{}, dir)
	if err == nil || !strings.Contains(err.Error(), "boots.jsonl:1") {
		t.Errorf("got %v, want the file and line", err)
	}
}
