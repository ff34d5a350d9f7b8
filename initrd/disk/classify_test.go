package disk

import (
	"os"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/initrd/gpt/gpttest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// TestClassifyOverwrittenOSBuilderDisk takes a disk that held an
// os-builder install (both GPT copies, osb-data to the end) and overwrites
// its start the way tools and people do, leaving the backup GPT at the end
// intact. Each must be foreign: the backup GPT alone does not say the disk
// is still ours. Before, the reader fell back to the backup table and the
// classifier let that valid GPT decide alone: every case below but the
// controls was "an os-builder disk" and was reinstalled without
// osb.install.wipe=1.
func TestClassifyOverwrittenOSBuilderDisk(t *testing.T) {
	const size = 64 << 20
	run := func(tool string, args ...string) func(t *testing.T, p string) {
		return func(t *testing.T, p string) { testutil.Run(t, testutil.RequireTool(t, tool), append(args, p)...) }
	}
	// write puts b at off, as a program writing its own header would.
	write := func(off int64, b []byte) func(t *testing.T, p string) {
		return func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(b, off); err != nil {
				t.Fatal(err)
			}
		}
	}
	header := func(n int, at map[int][]byte) []byte {
		b := make([]byte, n)
		for off, s := range at {
			copy(b[off:], s)
		}
		return b
	}
	// then runs steps in order: the tools below detect a GPT only behind
	// its protective MBR, and wipe both copies when they do.
	then := func(steps ...func(t *testing.T, p string)) func(t *testing.T, p string) {
		return func(t *testing.T, p string) {
			for _, s := range steps {
				s(t, p)
			}
		}
	}
	clearMBR := write(0, make([]byte, 512)) // dd if=/dev/zero of=DISK count=1
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = byte(i*7 + 1)
	}
	for _, tc := range []struct {
		name      string
		overwrite func(t *testing.T, path string)
		blkid     string // the TYPE blkid -p reports afterwards, "" to skip
		want      Kind
		reason    string
	}{
		{"untouched (control)", nil, "", Ours, ""},
		{"first MiB zeroed, backup GPT left (control)", write(0, make([]byte, 1<<20)), "", Ours, ""},
		{"mkswap (keeps the boot sectors)", run("mkswap"), "swap", Foreign, "swap area (at byte 4086)"},
		{"mkswap -f (erases the boot sectors)", run("mkswap", "-f"), "swap", Foreign, "swap area (at byte 4086)"},
		// libblkid finds the GPT and cryptsetup wipes both copies: foreign
		// before the fix too.
		{"cryptsetup luksFormat --type luks2", luksFormat("luks2"), "crypto_LUKS", Foreign, "LUKS2 encrypted volume (at byte 0)"},
		// Without the protective MBR libblkid sees no GPT, and the backup
		// stays.
		{"MBR cleared, then cryptsetup luksFormat --type luks2", then(clearMBR, luksFormat("luks2")), "crypto_LUKS", Foreign, "LUKS2 encrypted volume (at byte 0)"},
		{"MBR cleared, then cryptsetup luksFormat --type luks1", then(clearMBR, luksFormat("luks1")), "crypto_LUKS", Foreign, "LUKS1 encrypted volume (at byte 0)"},
		{"MBR cleared (control: the primary GPT is intact)", clearMBR, "", Ours, ""},
		{"synthetic LUKS2 header at byte 0", write(0, header(16<<10, map[int][]byte{0: []byte("LUKS\xba\xbe\x00\x02")})), "", Foreign, "LUKS2 encrypted volume (at byte 0)"},
		{"synthetic XFS superblock in sector 0 only (primary GPT intact)", write(0, header(512, map[int][]byte{0: []byte("XFSB")})), "", Foreign, "XFS file system (at byte 0)"},
		{"synthetic md 1.1 superblock in sector 0 only", write(0, header(512, map[int][]byte{0: md1(0)})), "", Foreign, "md 1.1"},
		{"unknown bytes over the primary GPT", write(0, junk), "", Foreign, "first MiB is not blank"},
		{"primary GPT header zeroed, protective MBR left", write(512, make([]byte, 512)), "", Foreign, "backup GPT"},
		{"primary GPT damaged", write(512+40, []byte{0xff}), "", Foreign, "damaged GPT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := sparseDisk(t, size, nil)
			gpttest.WriteTable(t, disk, gpttest.Installed(512, size), size)
			if tc.overwrite != nil {
				tc.overwrite(t, disk.Name())
			}
			if tc.blkid != "" {
				got := strings.TrimSpace(string(testutil.Run(t, testutil.RequireTool(t, "blkid"), "-p", "-o", "value", "-s", "TYPE", disk.Name())))
				if got != tc.blkid {
					t.Fatalf("blkid says %q, want %q: the tool did not make what the test means", got, tc.blkid)
				}
			}
			kind, _, reason, err := Classify(disk, 512, size)
			if err != nil {
				t.Fatal(err)
			}
			if kind != tc.want || !strings.Contains(reason, tc.reason) {
				t.Fatalf("got %v (%s), want %v naming %q", kind, reason, tc.want, tc.reason)
			}
			if tc.want != Foreign {
				return
			}
			if err := AdmitTarget(disk.Name(), kind, reason, false); err == nil || !strings.Contains(err.Error(), "osb.install.wipe=1") {
				t.Errorf("refusal without osb.install.wipe=1: %v", err)
			}
		})
	}
}
