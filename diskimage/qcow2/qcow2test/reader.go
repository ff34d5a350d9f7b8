// Package qcow2test reads qcow2 images back to raw, for tests: it is the
// independent check of what package qcow2 writes (besides qemu-img), and the
// V2 Disk kind reader the boot tests use. It reads version 2 and 3 images
// with no backing file, no encryption, no compression and no extended L2
// entries, and refuses anything else by name.
package qcow2test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxVirtualSize bounds what Open accepts (16 TiB).
const MaxVirtualSize = int64(16) << 40

// Image is an opened qcow2 image.
type Image struct {
	r           io.ReaderAt
	fileSize    int64
	clusterBits uint32
	VirtualSize int64
	l1          []uint64
}

// Open reads and checks the header and L1 table of the qcow2 image of
// fileSize bytes in r.
func Open(r io.ReaderAt, fileSize int64) (*Image, error) {
	var h [104]byte
	if fileSize < 72 {
		return nil, fmt.Errorf("qcow2: %d bytes is too short for a header", fileSize)
	}
	n := min(int64(len(h)), fileSize)
	if _, err := r.ReadAt(h[:n], 0); err != nil {
		return nil, fmt.Errorf("qcow2: read header: %w", err)
	}
	be := binary.BigEndian
	if be.Uint32(h[0:]) != 0x514649fb {
		return nil, errors.New("qcow2: no QFI\\xfb magic")
	}
	version := be.Uint32(h[4:])
	if version != 2 && version != 3 {
		return nil, fmt.Errorf("qcow2: version %d (want 2 or 3)", version)
	}
	if off, size := be.Uint64(h[8:]), be.Uint32(h[16:]); off != 0 || size != 0 {
		return nil, fmt.Errorf("qcow2: image has a backing file (name at offset %d, %d bytes): refused, a layer must stand alone", off, size)
	}
	img := &Image{r: r, fileSize: fileSize, clusterBits: be.Uint32(h[20:])}
	if img.clusterBits < 9 || img.clusterBits > 21 {
		return nil, fmt.Errorf("qcow2: cluster_bits %d out of range 9..21", img.clusterBits)
	}
	vs := be.Uint64(h[24:])
	if vs > uint64(MaxVirtualSize) {
		return nil, fmt.Errorf("qcow2: virtual size %d is over the %d-byte limit", vs, MaxVirtualSize)
	}
	img.VirtualSize = int64(vs)
	if m := be.Uint32(h[32:]); m != 0 {
		return nil, fmt.Errorf("qcow2: encrypted (method %d): refused", m)
	}
	if version == 3 {
		if fileSize < 104 {
			return nil, fmt.Errorf("qcow2: %d bytes is too short for a version 3 header", fileSize)
		}
		if inc := be.Uint64(h[72:]); inc&^1 != 0 { // bit 0, "dirty", is harmless to a reader
			return nil, fmt.Errorf("qcow2: incompatible features %#x (external data, compression type, extended L2...): refused", inc)
		}
		if ro := be.Uint32(h[96:]); ro > 6 {
			return nil, fmt.Errorf("qcow2: refcount_order %d out of range", ro)
		}
	}
	cs := int64(1) << img.clusterBits
	l2Cover := cs / 8 * cs
	l1Entries := int64(be.Uint32(h[36:]))
	if l1Entries < (img.VirtualSize+l2Cover-1)/l2Cover {
		return nil, fmt.Errorf("qcow2: L1 table of %d entries cannot cover %d bytes", l1Entries, img.VirtualSize)
	}
	if l1Entries > fileSize/8 {
		return nil, fmt.Errorf("qcow2: L1 table of %d entries is larger than the file", l1Entries)
	}
	l1Off := int64(be.Uint64(h[40:]))
	if err := img.checkOffset("L1 table", l1Off, l1Entries*8); err != nil {
		return nil, err
	}
	raw := make([]byte, l1Entries*8)
	if _, err := r.ReadAt(raw, l1Off); err != nil {
		return nil, fmt.Errorf("qcow2: read L1 table: %w", err)
	}
	img.l1 = make([]uint64, l1Entries)
	for i := range img.l1 {
		img.l1[i] = be.Uint64(raw[i*8:])
	}
	return img, nil
}

const offsetMask = 0x00fffffffffffe00

func (img *Image) checkOffset(what string, off, n int64) error {
	cs := int64(1) << img.clusterBits
	if off <= 0 || off%cs != 0 || off > img.fileSize || n > img.fileSize-off {
		return fmt.Errorf("qcow2: %s at offset %d (%d bytes) is not a cluster inside the %d-byte file", what, off, n, img.fileSize)
	}
	return nil
}

// WriteRaw writes the guest disk's allocated clusters to w at their guest
// offsets; the caller sizes w to VirtualSize (holes read as zeros).
func (img *Image) WriteRaw(w io.WriterAt) error {
	cs := int64(1) << img.clusterBits
	perL2 := cs / 8
	l2 := make([]byte, cs)
	buf := make([]byte, cs)
	be := binary.BigEndian
	loaded := int64(-1) // the L2 table in l2
	for off := int64(0); off < img.VirtualSize; {
		idx := off / cs
		l1e := img.l1[idx/perL2]
		l2Off := int64(l1e & offsetMask)
		var out []byte // nil: a zero cluster
		switch {
		case l2Off == 0:
		default:
			if loaded != l2Off {
				if err := img.checkOffset("L2 table", l2Off, cs); err != nil {
					return err
				}
				if _, err := img.r.ReadAt(l2, l2Off); err != nil {
					return fmt.Errorf("qcow2: read L2 table: %w", err)
				}
				loaded = l2Off
			}
			e := be.Uint64(l2[(idx%perL2)*8:])
			if e&(1<<62) != 0 {
				return fmt.Errorf("qcow2: cluster %d is compressed: refused", idx)
			}
			dOff := int64(e & offsetMask)
			switch {
			case e&1 != 0 || dOff == 0:
			default:
				if err := img.checkOffset("data cluster", dOff, cs); err != nil {
					return err
				}
				if _, err := img.r.ReadAt(buf, dOff); err != nil {
					return fmt.Errorf("qcow2: read cluster %d: %w", idx, err)
				}
				out = buf
			}
		}
		n := min(cs, img.VirtualSize-off)
		if out != nil {
			if _, err := w.WriteAt(out[:n], off); err != nil {
				return err
			}
		}
		off += n
	}
	return nil
}
