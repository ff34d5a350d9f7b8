package diskimage

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestLargeESP writes a UKI past 260 MiB, where go-diskfs switches to
// 4 KiB clusters, and checks the ESP with fsck.fat and mtools.
func TestLargeESP(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 300 MiB ESP")
	}
	fsck := testutil.RequireTool(t, "fsck.fat")
	mtype := testutil.RequireTool(t, "mtype")
	dir := t.TempDir()
	// Mostly zeros (kept sparse) with data at both ends.
	uki := testutil.SparseZeros(t, dir, "uki.efi", 300*MiB)
	f, err := os.OpenFile(uki, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 150 * MiB, 300*MiB - 5} {
		if _, err := f.WriteAt([]byte("MZ-x"), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	p := filepath.Join(dir, "disk.raw")
	opts := Options{UKI: uki, Root: writeInput(t, dir, "root", MiB, 3), Seed: "big"}
	if err := Write(p, opts); err != nil {
		t.Fatal(err)
	}
	l, err := Plan(opts)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := geometryFor(l.ESPSize); g.clusterSize != 4096 {
		t.Fatalf("ESP of %d MiB uses %d-byte clusters, want the 4 KiB case", l.ESPSize/MiB, g.clusterSize)
	}
	esp := filepath.Join(dir, "esp.img")
	if err := os.WriteFile(esp, testutil.ReadRange(t, p, l.ESPStart, l.ESPSize), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(fsck, "-n", esp).CombinedOutput(); err != nil || strings.Contains(string(out), "Free cluster summary") {
		t.Errorf("fsck.fat: %v\n%s", err, out)
	}
	got := testutil.Run(t, mtype, "-i", fmt.Sprintf("%s@@%d", p, l.ESPStart), "::EFI/BOOT/BOOTX64.EFI")
	if !bytes.Equal(got, testutil.ReadFile(t, uki)) {
		t.Error("UKI read back by mtools differs")
	}
}
