package disk

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/initrd/gpt"
	"github.com/ironcore-dev/os-builder/initrd/gpt/gpttest"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// sparseDisk is a sparse temp file of size bytes with the given bytes at
// their offsets (negative offsets count from the end).
func sparseDisk(t testing.TB, size int64, at map[int64][]byte) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "disk"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, b := range at {
		if off < 0 {
			off += size
		}
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// md1 is an md 1.x superblock start at off: magic, major version 1 and
// its own position in sectors at byte 128.
func md1(off int64) []byte {
	b := make([]byte, 136)
	copy(b, le32(mdMagic))
	copy(b[4:], le32(1))
	binary.LittleEndian.PutUint64(b[128:], uint64(off/512))
	return b
}

// TestClassifyWholeDiskSignatures writes each signature at its real offset
// into a sparse disk of an odd size (8 GiB + 3 MiB + 28.5 KiB: not aligned
// to the 64 KiB, 4 KiB or 256 KiB the end-of-disk formats round to) and
// checks that the installer calls it foreign, refuses it without
// osb.install.wipe=1, and names what it found. Before, LUKS, BlueStore,
// bcache, ZFS and md at the end were "blank" and overwritten.
func TestClassifyWholeDiskSignatures(t *testing.T) {
	const size = 8<<30 + 3<<20 + 28<<10 + 512
	md090 := int64(size)&^(64<<10-1) - 64<<10
	md10 := (int64(size) - 8<<10) &^ (4<<10 - 1)
	zfsEnd := int64(size) &^ (256<<10 - 1)
	zfsLE := binary.LittleEndian.AppendUint64(nil, 0x00bab10c)
	zfsBE := binary.BigEndian.AppendUint64(nil, 0x00bab10c)
	for _, tc := range []struct {
		name string
		at   map[int64][]byte
		want string // "" for blank
	}{
		{"blank", nil, ""},
		{"data past the first MiB only", map[int64][]byte{2 << 20: []byte("old data")}, ""},
		{"LUKS1", map[int64][]byte{0: []byte("LUKS\xba\xbe\x00\x01")}, "LUKS1 encrypted volume (at byte 0)"},
		{"LUKS2", map[int64][]byte{0: []byte("LUKS\xba\xbe\x00\x02")}, "LUKS2 encrypted volume (at byte 0)"},
		{"LUKS2 secondary header at 4 MiB only", map[int64][]byte{4 << 20: []byte("SKUL\xba\xbe\x00\x02")}, "LUKS2 encrypted volume (secondary header) (at byte 4194304)"},
		{"LUKS2 secondary header at 16 KiB", map[int64][]byte{16 << 10: []byte("SKUL\xba\xbe\x00\x02")}, "secondary header) (at byte 16384)"},
		{"Ceph BlueStore", map[int64][]byte{0: []byte("bluestore block device\n0f1e2d3c-")}, "Ceph BlueStore OSD (at byte 0)"},
		{"bcache", map[int64][]byte{4096 + 24: []byte(bcacheMagic)}, "bcache device (at byte 4120)"},
		{"LVM2 PV in sector 1", map[int64][]byte{512: []byte("LABELONE"), 512 + 24: []byte("LVM2 001")}, "LVM2 physical volume (at byte 512)"},
		{"LVM2 PV in sector 3", map[int64][]byte{1536: []byte("LABELONE"), 1536 + 24: []byte("LVM2 001")}, "LVM2 physical volume (at byte 1536)"},
		{"ZFS, last label only", map[int64][]byte{zfsEnd - 256<<10 + 128<<10 + 5<<10: zfsLE}, "ZFS pool member"},
		{"ZFS, second-to-last label", map[int64][]byte{zfsEnd - 512<<10 + 128<<10: zfsLE}, "ZFS pool member"},
		{"ZFS big endian, first label", map[int64][]byte{128 << 10: zfsBE}, "ZFS pool member (uberblock) (at byte 131072)"},
		{"md 0.90 at the end", map[int64][]byte{md090: append(le32(mdMagic), le32(0)...)}, "RAID member (md 0.90)"},
		{"md 0.90 big endian", map[int64][]byte{md090: append(be32(mdMagic), be32(0)...)}, "RAID member (md 0.90)"},
		{"md 1.0 at the end", map[int64][]byte{md10: md1(md10)}, "RAID member (md 1.0)"},
		{"md 1.1", map[int64][]byte{0: md1(0)}, "RAID member (md 1.1) (at byte 0)"},
		{"md 1.2", map[int64][]byte{4096: md1(4096)}, "RAID member (md 1.2) (at byte 4096)"},
		{"ext4", map[int64][]byte{1080: {0x53, 0xef}}, "ext2/3/4"},
		{"XFS", map[int64][]byte{0: []byte("XFSB")}, "XFS"},
		{"btrfs", map[int64][]byte{65536 + 64: []byte("_BHRfS_M")}, "btrfs"},
		{"swap", map[int64][]byte{4086: []byte("SWAPSPACE2")}, "swap area"},
		{"ISO 9660", map[int64][]byte{32769: []byte("CD001")}, "ISO 9660"},
		{"squashfs", map[int64][]byte{0: []byte("hsqs")}, "squashfs"},
		{"EROFS", map[int64][]byte{1024: {0xe2, 0xe1, 0xf5, 0xe0}}, "EROFS"},
		{"MBR", map[int64][]byte{510: {0x55, 0xaa}}, "MBR partition table or boot sector"},
		{"several", map[int64][]byte{0: md1(0), 1080: {0x53, 0xef}}, "(md 1.1) (at byte 0), an ext2/3/4 file system (at byte 1080)"},
		{"unknown bytes in the first MiB", map[int64][]byte{700000: {1}}, "first MiB is not blank (non-zero byte at 700000)"},
		{"LABELONE without LVM2 001", map[int64][]byte{512: []byte("LABELONE")}, "first MiB is not blank (non-zero byte at 512)"},
		// Magics without what makes them real are not what they claim.
		{"md 1.0 magic, wrong own offset", map[int64][]byte{md10: md1(md10 - 4096)}, ""},
		{"md magic at the 1.0 offset, version 0", map[int64][]byte{md10: append(le32(mdMagic), le32(0)...)}, ""},
		{"LUKS magic, version 3", map[int64][]byte{4 << 20: []byte("SKUL\xba\xbe\x00\x03")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			disk := sparseDisk(t, size, tc.at)
			kind, _, reason, err := Classify(disk, 512, size)
			if err != nil {
				t.Fatal(err)
			}
			refusal := AdmitTarget("/dev/vdb", kind, reason, false)
			if tc.want == "" {
				if kind != Blank || refusal != nil {
					t.Fatalf("got %v (%s), %v; want blank", kind, reason, refusal)
				}
				return
			}
			if kind != Foreign || !strings.Contains(reason, tc.want) {
				t.Fatalf("got %v (%s); want foreign naming %q", kind, reason, tc.want)
			}
			if refusal == nil || !strings.Contains(refusal.Error(), "osb.install.wipe=1") || !strings.Contains(refusal.Error(), tc.want) {
				t.Errorf("refusal without osb.install.wipe=1: %v", refusal)
			}
			if err := AdmitTarget("/dev/vdb", kind, reason, true); err != nil {
				t.Errorf("with osb.install.wipe=1: %v", err)
			}
		})
	}
}

// TestClassifyRealVolumes makes the real things with Debian's tools on
// plain files and checks both that blkid (the reference prober) sees what
// was made and that the installer refuses it, naming it.
func TestClassifyRealVolumes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		make     func(t *testing.T, path string)
		blkid    string // TYPE blkid -p reports
		want     string
		wipeHead int64 // zero this many bytes at the start afterwards
	}{
		{"cryptsetup luksFormat --type luks1", luksFormat("luks1"), "crypto_LUKS", "LUKS1 encrypted volume", 0},
		{"cryptsetup luksFormat --type luks2", luksFormat("luks2"), "crypto_LUKS", "LUKS2 encrypted volume (at byte 0)", 0},
		{"LUKS2 with its primary header zeroed", luksFormat("luks2"), "", "LUKS2 encrypted volume (secondary header) (at byte 16384)", 16 << 10},
		{"make-bcache -B", func(t *testing.T, p string) { testutil.Run(t, testutil.RequireTool(t, "make-bcache"), "-B", p) }, "bcache", "bcache device", 0},
		{"pvcreate on a loop device", pvcreate, "LVM2_member", "LVM2 physical volume (at byte 512)", 0},
		{"mkswap", func(t *testing.T, p string) { testutil.Run(t, testutil.RequireTool(t, "mkswap"), p) }, "swap", "swap area", 0},
		{"mke2fs -t ext4", func(t *testing.T, p string) {
			testutil.Run(t, testutil.RequireTool(t, "mke2fs"), "-q", "-F", "-t", "ext4", p)
		}, "ext4", "ext2/3/4", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 64 << 20
			disk := sparseDisk(t, size, nil)
			tc.make(t, disk.Name())
			if tc.wipeHead > 0 {
				if _, err := disk.WriteAt(make([]byte, tc.wipeHead), 0); err != nil {
					t.Fatal(err)
				}
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
			if kind != Foreign || !strings.Contains(reason, tc.want) {
				t.Fatalf("got %v (%s), want foreign naming %q", kind, reason, tc.want)
			}
			if err := AdmitTarget(disk.Name(), kind, reason, false); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("refusal: %v", err)
			}
		})
	}
}

// pvcreate makes the file at p an LVM2 physical volume. LVM takes block
// devices only, so the file is attached to a loop device for the while.
func pvcreate(t *testing.T, p string) {
	pv := testutil.RequireTool(t, "pvcreate")
	losetup := testutil.RequireTool(t, "losetup")
	if os.Geteuid() != 0 {
		testutil.Missing(t, "pvcreate needs root for a loop device")
	}
	dev := strings.TrimSpace(string(testutil.Run(t, losetup, "--find", "--show", p)))
	defer testutil.Run(t, losetup, "--detach", dev)
	cmd := exec.Command(pv, "--force", "--force", "--yes",
		"--config", "devices { obtain_device_list_from_udev=0 use_devicesfile=0 }", dev)
	cmd.Env = append(os.Environ(), "LVM_SUPPRESS_FD_WARNINGS=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pvcreate %s: %v\n%s", dev, err, out)
	}
}

// headSignature is a signature anchored at the start of a disk, in the
// form its format writes it (the specifications signatures.go cites; not
// its probes): pieces of bytes at their offsets, on a disk of at least
// need bytes.
type headSignature struct {
	what string
	at   map[int64][]byte
	need int64
}

// headSignatures are what FuzzClassifyDisk stamps and looks for: every
// known signature that lies in the first MiB of any disk.
func headSignatures() []headSignature {
	sigs := []headSignature{
		{what: "LUKS1", at: map[int64][]byte{0: []byte("LUKS\xba\xbe\x00\x01")}},
		{what: "LUKS2", at: map[int64][]byte{0: []byte("LUKS\xba\xbe\x00\x02")}},
		{what: "BlueStore", at: map[int64][]byte{0: []byte("bluestore block device")}},
		{what: "bcache", at: map[int64][]byte{4096 + 24: []byte(bcacheMagic)}},
		{what: "md 1.1", at: map[int64][]byte{0: md1(0)}},
		{what: "md 1.2", at: map[int64][]byte{4096: md1(4096)}},
		{what: "ext4", at: map[int64][]byte{1080: {0x53, 0xef}}},
		{what: "XFS", at: map[int64][]byte{0: []byte("XFSB")}},
		{what: "btrfs", at: map[int64][]byte{65536 + 64: []byte("_BHRfS_M")}},
		{what: "swap", at: map[int64][]byte{4086: []byte("SWAPSPACE2")}},
		{what: "ISO 9660", at: map[int64][]byte{32769: []byte("CD001")}},
		{what: "squashfs", at: map[int64][]byte{0: []byte("hsqs")}},
		{what: "EROFS", at: map[int64][]byte{1024: {0xe2, 0xe1, 0xf5, 0xe0}}},
		// An MBR that is not a GPT's protective one: a Linux partition in
		// entry 1, entries 2-4 empty.
		{what: "MBR", at: map[int64][]byte{446: append(append([]byte{0, 0, 0, 0, 0x83}, make([]byte, 59)...), 0x55, 0xaa)}},
	}
	for off := int64(16 << 10); off < probeWindow; off *= 2 {
		sigs = append(sigs, headSignature{what: "LUKS2 secondary", at: map[int64][]byte{off: []byte("SKUL\xba\xbe\x00\x02")}})
	}
	for s := int64(0); s < 4; s++ {
		sigs = append(sigs, headSignature{what: "LVM2", at: map[int64][]byte{s * 512: []byte("LABELONE"), s*512 + 24: []byte("LVM2 001")}})
	}
	// ZFS: every uberblock slot of the two labels at the start, either
	// byte order; a label counts when it lies wholly on the disk.
	for _, label := range []int64{0, 256 << 10} {
		for slot := label + 128<<10; slot < label+256<<10; slot += 1 << 10 {
			for _, m := range [][]byte{binary.LittleEndian.AppendUint64(nil, 0x00bab10c), binary.BigEndian.AppendUint64(nil, 0x00bab10c)} {
				sigs = append(sigs, headSignature{what: "ZFS", at: map[int64][]byte{slot: m}, need: label + 256<<10})
			}
		}
	}
	return sigs
}

// on says whether disk, of size bytes, holds s.
func (s headSignature) on(disk io.ReaderAt, size int64) bool {
	if size < s.need {
		return false
	}
	for off, b := range s.at {
		got := make([]byte, len(b))
		if n, _ := disk.ReadAt(got, off); n != len(b) || !bytes.Equal(got, b) {
			return false
		}
	}
	return true
}

// FuzzClassifyDisk classifies fuzzed bytes as a small disk, optionally over
// one or both copies of an os-builder GPT and with a known signature
// stamped on: no panic, no read outside the disk, a reason for every
// foreign verdict, and a disk holding a known signature in its first MiB
// is never "ours" or "blank", whatever GPT copy is left (finding 1 of
// issue 22: a backup GPT made a LUKS or swap disk "ours").
func FuzzClassifyDisk(f *testing.F) {
	sigs := headSignatures()
	const none = 0xffff
	f.Add([]byte("LUKS\xba\xbe\x00\x02"), int64(0), uint16(0), uint8(0), uint16(none))
	f.Add(md1(4096), int64(4096), uint16(0), uint8(0), uint16(none))
	f.Add([]byte(bcacheMagic), int64(4120), uint16(1), uint8(0), uint16(none))
	f.Add(binary.LittleEndian.AppendUint64(nil, 0x00bab10c), int64(128<<10), uint16(3), uint8(0), uint16(none))
	// An os-builder disk, whole, with its start overwritten and with only
	// its backup GPT.
	f.Add([]byte{}, int64(0), uint16(2048), uint8(3), uint16(none))
	f.Add([]byte{}, int64(0), uint16(2048), uint8(2), uint16(none))
	// Each signature over either GPT copy, on the smallest disk it fits:
	// the fuzzer stays near the seeds' sizes, and a small disk is a fast
	// input (the probe reads up to a MiB at each end).
	for i, s := range sigs {
		if s.what == "ZFS" && i%97 != 0 {
			continue
		}
		end := s.need
		for off, p := range s.at {
			end = max(end, off+int64(len(p)))
		}
		kib := uint16(max(64, end>>10+8))
		f.Add([]byte{}, int64(0), kib, uint8(3), uint16(i))
		f.Add([]byte("LUKS\xba\xbe\x00\x02"), int64(0), kib+uint16(i%3), uint8(2), uint16(i))
	}
	f.Fuzz(func(t *testing.T, b []byte, off int64, sizeKiB uint16, layout uint8, sig uint16) {
		size := int64(sizeKiB%(4<<10))<<10 + int64(len(b))
		if off < 0 || off > size-int64(len(b)) {
			off = 0
		}
		disk := &gpttest.Sparse{Size: size}
		if tb := gpttest.Installed(512, size); tb != nil && layout&3 != 0 {
			primary, backup, boff, err := tb.Encode(size)
			if err != nil {
				t.Fatal(err)
			}
			if layout&1 != 0 {
				disk.Put(0, primary)
			}
			if layout&2 != 0 {
				disk.Put(boff, backup)
			}
		}
		disk.Put(off, b)
		if int(sig) < len(sigs) && sigs[sig].need <= size {
			for o, p := range sigs[sig].at {
				if o+int64(len(p)) <= size {
					disk.Put(o, p)
				}
			}
		}
		kind, _, reason, err := Classify(disk, 512, size)
		if err != nil {
			t.Fatalf("in-memory disk: %v", err)
		}
		if (kind == Foreign) != (reason != "") {
			t.Fatalf("%v with reason %q", kind, reason)
		}
		if disk.Max > max(probeWindow, gpt.MaxEntryArray) {
			t.Fatalf("read of %d bytes", disk.Max)
		}
		if kind == Foreign {
			return
		}
		for _, s := range sigs {
			if s.on(disk, size) {
				t.Fatalf("a disk holding %s (%v) is %v", s.what, s.at, kind)
			}
		}
	})
}

// luksFormat makes a LUKS volume of type typ (luks1, luks2) with Debian's
// cryptsetup on the file it is given.
func luksFormat(typ string) func(t *testing.T, p string) {
	return func(t *testing.T, p string) {
		// A cheap key derivation: the test is about the header.
		args := []string{"luksFormat", "--batch-mode", "--type", typ, "--pbkdf-force-iterations", "1000", "--key-file", "-"}
		if typ == "luks2" {
			args = append(args, "--pbkdf", "pbkdf2")
		}
		cmd := exec.Command(testutil.RequireTool(t, "cryptsetup"), append(args, p)...)
		cmd.Stdin = strings.NewReader("not a secret")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cryptsetup: %v\n%s", err, out)
		}
	}
}
