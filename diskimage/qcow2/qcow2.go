// Package qcow2 writes a raw disk image as a qcow2 (version 3) image: the
// Disk kind of IronCore Image V2 carries qcow2 layers. The output has no
// backing file, no compression, no encryption and no snapshots; clusters
// that are all zeros are left unallocated (they read as zeros). Metadata
// comes first and data clusters follow in guest order, so the bytes depend
// only on the raw image: the same disk always gives the same qcow2 digest.
//
// Writing is two passes over the raw image and holds one bit per cluster:
// Scan finds the clusters that hold data, WriteTo streams the qcow2.
package qcow2

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// Format constants (QEMU's docs/interop/qcow2.txt).
const (
	Magic       = 0x514649fb // "QFI\xfb"
	Version     = 3
	ClusterBits = 16 // 64 KiB clusters, qemu-img's default
	ClusterSize = 1 << ClusterBits
	// HeaderLength is the version 3 header without the optional
	// compression-type field (zlib is implied, and nothing is compressed).
	HeaderLength = 104
	// RefcountOrder 4: 16-bit refcounts, qemu-img's default.
	RefcountOrder = 4

	l2Entries       = ClusterSize / 8
	refcountEntries = ClusterSize * 8 / (1 << RefcountOrder)
	// flagCopied (bit 63 of L1 and L2 entries): the cluster's refcount is
	// exactly 1, which is true of every cluster written here.
	flagCopied = uint64(1) << 63
)

// MaxVirtualSize bounds the raw image: 16 TiB is 256 Mi clusters, a 32 MiB
// bitmap.
const MaxVirtualSize = int64(16) << 40

// Layout is where every cluster of the qcow2 image of one raw image goes.
type Layout struct {
	virtualSize int64
	used        []uint64 // bit i: guest cluster i holds a non-zero byte
	dataCount   int64
	rawSHA256   string

	l1Entries      int64
	l1Clusters     int64
	l2Tables       int64 // L2 tables allocated (one per L1 entry with data)
	refTableClus   int64
	refBlocks      int64
	refTableOffset int64
	l1Offset       int64
	l2Offset       int64
	dataOffset     int64
	totalClusters  int64
}

// Scan reads the raw image (size bytes from r) and lays out its qcow2
// image. size must be a positive multiple of 512 and at most
// MaxVirtualSize.
func Scan(r io.ReaderAt, size int64) (*Layout, error) {
	if size <= 0 || size%512 != 0 {
		return nil, fmt.Errorf("qcow2: raw image of %d bytes: want a positive multiple of 512", size)
	}
	if size > MaxVirtualSize {
		return nil, fmt.Errorf("qcow2: raw image of %d bytes is over the %d-byte limit", size, MaxVirtualSize)
	}
	guestClusters := ceilDiv(size, ClusterSize)
	l := &Layout{virtualSize: size, used: make([]uint64, ceilDiv(guestClusters, 64))}
	holes, err := holesOf(r, size)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, ClusterSize)
	sum := sha256.New()
	for c := int64(0); c < guestClusters; c++ {
		if holes.covers(c) {
			sum.Write(zeros[:min(ClusterSize, size-c*ClusterSize)])
			continue
		}
		n, err := readCluster(r, c, size, buf)
		if err != nil {
			return nil, err
		}
		sum.Write(buf[:n])
		if !allZero(buf[:n]) {
			l.used[c/64] |= 1 << (c % 64)
			l.dataCount++
		}
	}
	l.rawSHA256 = hex.EncodeToString(sum.Sum(nil))
	l.plan()
	return l, nil
}

// RawSHA256 is the hex sha256 of the raw image as Scan read it, so a
// caller that knows the raw image's digest can check it without a third
// pass.
func (l *Layout) RawSHA256() string { return l.rawSHA256 }

func (l *Layout) isUsed(c int64) bool { return l.used[c/64]&(1<<(c%64)) != 0 }

// plan places the metadata: header, refcount table, refcount blocks, L1
// table, L2 tables, then the data clusters.
func (l *Layout) plan() {
	guestClusters := ceilDiv(l.virtualSize, ClusterSize)
	l.l1Entries = ceilDiv(guestClusters, l2Entries)
	l.l1Clusters = ceilDiv(l.l1Entries*8, ClusterSize)
	l.l2Tables = 0
	for i := int64(0); i < l.l1Entries; i++ {
		if l.l2HasData(i) {
			l.l2Tables++
		}
	}
	fixed := 1 + l.l1Clusters + l.l2Tables + l.dataCount
	// The refcount structures count themselves: grow until they cover
	// every cluster, them included.
	l.refBlocks, l.refTableClus = 1, 1
	for {
		total := fixed + l.refBlocks + l.refTableClus
		rb := ceilDiv(total, refcountEntries)
		rt := ceilDiv(rb*8, ClusterSize)
		if rb == l.refBlocks && rt == l.refTableClus {
			l.totalClusters = total
			break
		}
		l.refBlocks, l.refTableClus = max(rb, l.refBlocks), max(rt, l.refTableClus)
	}
	l.refTableOffset = ClusterSize
	refBlockOffset := l.refTableOffset + l.refTableClus*ClusterSize
	l.l1Offset = refBlockOffset + l.refBlocks*ClusterSize
	l.l2Offset = l.l1Offset + l.l1Clusters*ClusterSize
	l.dataOffset = l.l2Offset + l.l2Tables*ClusterSize
}

func (l *Layout) l2HasData(i int64) bool {
	guestClusters := ceilDiv(l.virtualSize, ClusterSize)
	for c := i * l2Entries; c < min((i+1)*l2Entries, guestClusters); c++ {
		if l.isUsed(c) {
			return true
		}
	}
	return false
}

// Size is the length of the qcow2 image in bytes.
func (l *Layout) Size() int64 { return l.totalClusters * ClusterSize }

// VirtualSize is the raw image's size.
func (l *Layout) VirtualSize() int64 { return l.virtualSize }

// DataClusters is how many clusters hold data.
func (l *Layout) DataClusters() int64 { return l.dataCount }

// WriteTo streams the qcow2 image to w, reading the data clusters from r
// (the raw image Scan read). It fails if a cluster Scan found all zeros
// now holds data, or the other way round: the raw image changed.
func (l *Layout) WriteTo(r io.ReaderAt, w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	if err := l.writeMetadata(cw); err != nil {
		return cw.n, err
	}
	holes, err := holesOf(r, l.virtualSize)
	if err != nil {
		return cw.n, err
	}
	buf := make([]byte, ClusterSize)
	guestClusters := ceilDiv(l.virtualSize, ClusterSize)
	for c := int64(0); c < guestClusters; c++ {
		if holes.covers(c) {
			if l.isUsed(c) {
				return cw.n, fmt.Errorf("qcow2: raw image changed between scan and write (cluster %d)", c)
			}
			continue
		}
		n, err := readCluster(r, c, l.virtualSize, buf)
		if err != nil {
			return cw.n, err
		}
		zero := allZero(buf[:n])
		if zero == l.isUsed(c) {
			return cw.n, fmt.Errorf("qcow2: raw image changed between scan and write (cluster %d)", c)
		}
		if zero {
			continue
		}
		clear(buf[n:])
		if _, err := cw.Write(buf); err != nil {
			return cw.n, err
		}
	}
	if cw.n != l.Size() {
		return cw.n, fmt.Errorf("qcow2: wrote %d bytes, laid out %d", cw.n, l.Size())
	}
	return cw.n, nil
}

func (l *Layout) writeMetadata(w io.Writer) error {
	cluster := make([]byte, ClusterSize)
	be := binary.BigEndian
	// Header.
	be.PutUint32(cluster[0:], Magic)
	be.PutUint32(cluster[4:], Version)
	// 8: backing file offset, 16: its size: none.
	be.PutUint32(cluster[20:], ClusterBits)
	be.PutUint64(cluster[24:], uint64(l.virtualSize))
	// 32: crypt method: none.
	be.PutUint32(cluster[36:], uint32(l.l1Entries))
	be.PutUint64(cluster[40:], uint64(l.l1Offset))
	be.PutUint64(cluster[48:], uint64(l.refTableOffset))
	be.PutUint32(cluster[56:], uint32(l.refTableClus))
	// 60: snapshots: none; 72..95: no feature bits.
	be.PutUint32(cluster[96:], RefcountOrder)
	be.PutUint32(cluster[100:], HeaderLength)
	// At 104: the end-of-extensions marker (type 0, length 0): zeros.
	if _, err := w.Write(cluster); err != nil {
		return err
	}
	// Refcount table: one entry per refcount block.
	refBlockOffset := l.refTableOffset + l.refTableClus*ClusterSize
	table := make([]byte, l.refTableClus*ClusterSize)
	for i := int64(0); i < l.refBlocks; i++ {
		be.PutUint64(table[i*8:], uint64(refBlockOffset+i*ClusterSize))
	}
	if _, err := w.Write(table); err != nil {
		return err
	}
	// Refcount blocks: every cluster of the file has refcount 1.
	for i := int64(0); i < l.refBlocks; i++ {
		clear(cluster)
		for j := int64(0); j < refcountEntries; j++ {
			if i*refcountEntries+j >= l.totalClusters {
				break
			}
			be.PutUint16(cluster[j*2:], 1)
		}
		if _, err := w.Write(cluster); err != nil {
			return err
		}
	}
	// L1 table.
	l1 := make([]byte, l.l1Clusters*ClusterSize)
	next := l.l2Offset
	for i := int64(0); i < l.l1Entries; i++ {
		if l.l2HasData(i) {
			be.PutUint64(l1[i*8:], uint64(next)|flagCopied)
			next += ClusterSize
		}
	}
	if _, err := w.Write(l1); err != nil {
		return err
	}
	// L2 tables, data clusters numbered in guest order.
	data := l.dataOffset
	guestClusters := ceilDiv(l.virtualSize, ClusterSize)
	for i := int64(0); i < l.l1Entries; i++ {
		if !l.l2HasData(i) {
			continue
		}
		clear(cluster)
		for j := int64(0); j < l2Entries; j++ {
			c := i*l2Entries + j
			if c >= guestClusters {
				break
			}
			if l.isUsed(c) {
				be.PutUint64(cluster[j*8:], uint64(data)|flagCopied)
				data += ClusterSize
			}
		}
		if _, err := w.Write(cluster); err != nil {
			return err
		}
	}
	return nil
}

// readCluster reads guest cluster c into buf and returns how many bytes of
// it are inside the image (the last cluster may be short).
func readCluster(r io.ReaderAt, c, size int64, buf []byte) (int, error) {
	off := c * ClusterSize
	n := int(min(ClusterSize, size-off))
	if _, err := r.ReadAt(buf[:n], off); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("qcow2: raw image shorter than %d bytes (cluster %d): %w", size, c, io.ErrUnexpectedEOF)
		}
		return 0, fmt.Errorf("qcow2: read raw image at %d: %w", off, err)
	}
	return n, nil
}

var zeros = make([]byte, ClusterSize)

func allZero(b []byte) bool { return bytes.Equal(b, zeros[:len(b)]) }

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
