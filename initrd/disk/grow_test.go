package disk

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/diskimage"
	"github.com/ironcore-dev/os-builder/initrd/gpt"
	"github.com/ironcore-dev/os-builder/internal/testutil"
)

// writeDiskImage writes a real disk image (diskimage.Write) with a data
// partition of dataMiB (0: none) and returns its path.
func writeDiskImage(t *testing.T, dataMiB int64) string {
	t.Helper()
	dir := t.TempDir()
	uki, root, img := filepath.Join(dir, "uki.efi"), filepath.Join(dir, "root"), filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(uki, bytes.Repeat([]byte("UKI!"), 1<<18), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, bytes.Repeat([]byte("root"), 3<<18), 0o644); err != nil {
		t.Fatal(err)
	}
	err := diskimage.Write(img, diskimage.Options{UKI: uki, Root: root, DataSizeMiB: dataMiB, Seed: "pid1-grow", SourceDateEpoch: 1700000000})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestFitGPTToDisk fits real disk images to disks of other sizes and
// checks the result with sgdisk, an independent GPT implementation.
func TestFitGPTToDisk(t *testing.T) {
	sgdisk := testutil.RequireTool(t, "sgdisk")
	tests := []struct {
		name      string
		dataMiB   int64
		grow      int64 // bytes added to the image
		wantGrown bool
		wantMoved bool
	}{
		{"as built", 16, 0, false, false},
		{"bigger disk", 16, 100*mib + 7*512, true, true},
		{"a few sectors more", 16, 16 * 512, false, true},
		{"no data partition", 0, 100 * mib, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			img := writeDiskImage(t, tc.dataMiB)
			fi, err := os.Stat(img)
			if err != nil {
				t.Fatal(err)
			}
			size := fi.Size() + tc.grow
			if err := os.Truncate(img, size); err != nil {
				t.Fatal(err)
			}
			before := testutil.FileSHA256(t, img)
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			grown, oldEnd, newEnd, moved, err := FitGPTToDisk(f, 512, size)
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			if (grown != nil) != tc.wantGrown || moved != tc.wantMoved {
				t.Fatalf("grown %v, moved %v; want grown %v, moved %v", grown != nil, moved, tc.wantGrown, tc.wantMoved)
			}
			if !tc.wantGrown && !tc.wantMoved {
				if testutil.FileSHA256(t, img) != before {
					t.Error("the image changed although it fits its disk")
				}
				return
			}
			if out := string(testutil.Run(t, sgdisk, "-v", img)); !strings.Contains(out, "No problems found") {
				t.Errorf("sgdisk -v:\n%s", out)
			}
			if tc.wantGrown {
				lastUsable := size/512 - 34
				wantEnd := (lastUsable + 1) * 512 / mib * mib
				if newEnd != wantEnd || oldEnd != newEnd-tc.grow/mib*mib {
					t.Errorf("osb-data end %d -> %d, want %d -> %d", oldEnd, newEnd, newEnd-tc.grow/mib*mib, wantEnd)
				}
				info := string(testutil.Run(t, sgdisk, "-i", "3", img))
				if want := "Last sector: " + strconv.FormatInt(wantEnd/512-1, 10); !strings.Contains(info, want) || !strings.Contains(info, "'osb-data'") {
					t.Errorf("sgdisk -i 3 lacks %q and the name osb-data:\n%s", want, info)
				}
			}
			// A second fit has nothing left to do.
			f, err = os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if grown, _, _, moved, err := FitGPTToDisk(f, 512, size); err != nil || grown != nil || moved {
				t.Errorf("second fit: grown %v, moved %v, %v", grown != nil, moved, err)
			}
		})
	}
}

// TestGrowDataEntry: osb-data grows only when it is the last partition.
func TestGrowDataEntry(t *testing.T) {
	part := func(idx int, name string, first, last uint64) gpt.Partition {
		return gpt.Partition{Index: idx, Name: name, Type: gpt.MustGUID(gpt.TypeLinuxVar), FirstLBA: first, LastLBA: last}
	}
	const size = 1 << 30
	tests := []struct {
		name  string
		parts []gpt.Partition
		want  bool
	}{
		{"last", []gpt.Partition{part(2, PartLabelRoot, 2048, 4095), part(3, PartLabelData, 4096, 8191)}, true},
		{"not last", []gpt.Partition{part(3, PartLabelData, 4096, 8191), part(4, "osb-other", 8192, 10239)}, false},
		{"no data", []gpt.Partition{part(2, PartLabelRoot, 2048, 4095)}, false},
		{"already at the end", []gpt.Partition{part(3, PartLabelData, 4096, size/512-2049)}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := &gpt.Table{SectorSize: 512, Partitions: tc.parts}
			p, _, end := growDataEntry(tab, size)
			if (p != nil) != tc.want {
				t.Fatalf("grown %v, want %v", p != nil, tc.want)
			}
			if p != nil {
				if end != size-mib || p.LastLBA != uint64(end/512)-1 || tab.ByName(PartLabelData).LastLBA != p.LastLBA {
					t.Errorf("grown to byte %d, LBA %d; want the last usable MiB", end, p.LastLBA)
				}
				if _, _, _, err := tab.Encode(size); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// superblock is an ext4 superblock with the fields Ext4Geometry reads.
func superblock(logBlock uint32, blocksLo, blocksHi uint32, bit64 bool) []byte {
	sb := make([]byte, 1024)
	binary.LittleEndian.PutUint32(sb[4:], blocksLo)
	binary.LittleEndian.PutUint32(sb[0x18:], logBlock)
	binary.LittleEndian.PutUint16(sb[0x38:], 0xef53)
	if bit64 {
		binary.LittleEndian.PutUint32(sb[0x60:], 0x80)
	}
	binary.LittleEndian.PutUint32(sb[0x150:], blocksHi)
	return sb
}

func TestExt4Geometry(t *testing.T) {
	tests := []struct {
		name    string
		sb      []byte
		bs      int64
		blocks  uint64
		wantErr string
	}{
		{"4k", superblock(2, 65536, 0, true), 4096, 65536, ""},
		{"64bit high word", superblock(2, 1, 2, true), 4096, 2<<32 | 1, ""},
		{"high word ignored without 64bit", superblock(0, 7, 2, false), 1024, 7, ""},
		{"short", superblock(2, 1, 0, true)[:0x100], 0, 0, "bytes"},
		{"bad magic", append([]byte{}, make([]byte, 1024)...), 0, 0, "magic"},
		{"huge block", superblock(7, 1, 0, true), 0, 0, "out of range"},
		{"zero blocks", superblock(2, 0, 0, true), 0, 0, "zero blocks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bs, blocks, err := Ext4Geometry(tc.sb)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || bs != tc.bs || blocks != tc.blocks {
				t.Fatalf("got %d, %d, %v; want %d, %d", bs, blocks, err, tc.bs, tc.blocks)
			}
		})
	}
}

// TestExt4GeometryOfDiskImage reads the data partition the disk image
// writer made (mke2fs) and compares with what its layout says.
func TestExt4GeometryOfDiskImage(t *testing.T) {
	img := writeDiskImage(t, 16)
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	tab, err := gpt.Read(f, 512, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	start, end := tab.ByName(PartLabelData).ByteRange(512)
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, start+1024); err != nil {
		t.Fatal(err)
	}
	bs, blocks, err := Ext4Geometry(sb)
	if err != nil || bs != 4096 || int64(blocks)*bs != end-start {
		t.Fatalf("block size %d, %d blocks, %v; want 4096-byte blocks filling %d bytes", bs, blocks, err, end-start)
	}
}

func FuzzExt4Geometry(f *testing.F) {
	f.Add(superblock(2, 65536, 0, true))
	f.Add(superblock(2, 1, 2, true))
	f.Add(superblock(9, 1, 0, false))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, sb []byte) {
		bs, blocks, err := Ext4Geometry(sb)
		if err != nil {
			return
		}
		if bs < 1024 || bs > 64<<10 || blocks == 0 {
			t.Fatalf("accepted block size %d, %d blocks", bs, blocks)
		}
	})
}
