package qcow2

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"golang.org/x/sys/unix"
)

// holeSet is the clusters of a sparse raw file that lie wholly in holes:
// they read as zeros, so neither pass reads them (a 2 GiB disk with 150 MiB
// of data reads 150 MiB).
type holeSet struct {
	// dataStart/dataEnd: the file's data extents, sorted; nil means
	// unknown (not a file, or no SEEK_DATA): every cluster is read.
	dataStart, dataEnd []int64
	known              bool
}

// holesOf asks the file system where r's data is, when r is a file.
func holesOf(r io.ReaderAt, size int64) (holeSet, error) {
	f, ok := r.(*os.File)
	if !ok {
		return holeSet{}, nil
	}
	var h holeSet
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after off
		}
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
			return holeSet{}, nil
		}
		if err != nil {
			return holeSet{}, fmt.Errorf("qcow2: find data in %s: %w", f.Name(), err)
		}
		if data >= size {
			break
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return holeSet{}, fmt.Errorf("qcow2: find hole in %s: %w", f.Name(), err)
		}
		h.dataStart = append(h.dataStart, data)
		h.dataEnd = append(h.dataEnd, min(hole, size))
		off = hole
	}
	h.known = true
	return h, nil
}

// covers says whether guest cluster c is wholly inside a hole.
func (h holeSet) covers(c int64) bool {
	if !h.known {
		return false
	}
	start, end := c*ClusterSize, (c+1)*ClusterSize
	// The first extent that ends after the cluster starts.
	i := sort.Search(len(h.dataEnd), func(i int) bool { return h.dataEnd[i] > start })
	return i == len(h.dataEnd) || h.dataStart[i] >= end
}
