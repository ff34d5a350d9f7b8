package disk

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/ironcore-dev/os-builder/initrd/gpt/gpttest"
)

// TestClassifyHostileGPT: a disk whose GPT header claims hostile sizes
// (with a valid CRC) is foreign, and the reason names the field.
func TestClassifyHostileGPT(t *testing.T) {
	const size = 4 << 20
	for _, tc := range gpttest.HostileHeaders() {
		t.Run(tc.Name, func(t *testing.T) {
			k, _, reason, err := Classify(bytes.NewReader(gpttest.Hostile(size, tc.Edit)), 512, size)
			if err != nil || k != Foreign || !strings.Contains(reason, tc.Want) {
				t.Errorf("Classify: %v %q %v", k, reason, err)
			}
		})
	}
}

// TestClassifyTinyDisk: a disk smaller than a GPT is blank, not a panic.
func TestClassifyTinyDisk(t *testing.T) {
	for _, size := range []int64{0, 511, 1024} {
		if k, _, _, err := Classify(bytes.NewReader(make([]byte, size)), 512, size); err != nil || k != Blank {
			t.Errorf("size %d: %v %v", size, k, err)
		}
	}
}

// TestInstallSinkBoundsStream: the download may not announce, or send,
// more bytes than the target disk holds; before, an endless stream was
// hashed forever and a huge Content-Length was accepted.
func TestInstallSinkBoundsStream(t *testing.T) {
	img := testImage(t, 1<<20)
	size := int64(len(img)) + 1<<20
	disk := newDisk(t, size)
	s := &Installer{disk: disk, sectorSize: 512, size: size, logf: t.Logf}
	if _, err := s.Begin(size + 1); err == nil || !strings.Contains(err.Error(), "larger than the target disk") {
		t.Errorf("announced length past the disk: %v", err)
	}
	w, err := s.Begin(-1) // unknown length
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(img); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 1<<20)); err != nil {
		t.Fatalf("up to the disk's size: %v", err)
	}
	if _, err := w.Write([]byte{0}); err == nil || !strings.Contains(err.Error(), "longer than the target disk") {
		t.Errorf("a byte past the disk: %v", err)
	}
	// A retry starts over.
	if w, err = s.Begin(int64(len(img))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(img); err != nil {
		t.Errorf("after begin: %v", err)
	}
}

// TestInstallSinkRefusesHostileImageGPT: the image's first MiB is not yet
// verified when the installer reads its GPT; a hostile entry size there is
// refused before allocating, and nothing is written to the disk.
func TestInstallSinkRefusesHostileImageGPT(t *testing.T) {
	const size = 64 << 20
	disk := newDisk(t, size)
	s := &Installer{disk: disk, sectorSize: 512, size: size, logf: t.Logf}
	w, err := s.Begin(-1)
	if err != nil {
		t.Fatal(err)
	}
	head := gpttest.Hostile(imageHeaderLen, func(h []byte) {
		binary.LittleEndian.PutUint32(h[80:], 1024)
		binary.LittleEndian.PutUint32(h[84:], 1<<20)
	})
	if _, err := w.Write(head); err == nil || !strings.Contains(err.Error(), "the image's partition table") || !strings.Contains(err.Error(), "entry size 1048576") {
		t.Errorf("err = %v", err)
	}
	if s.plan != nil {
		t.Error("a plan was made")
	}
	got := make([]byte, 64<<10)
	disk.ReadAt(got, 0)
	if !bytes.Equal(got, make([]byte, len(got))) {
		t.Error("the disk was written")
	}
}
