package diskimage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"
)

// FAT32 boot sector fields normalizeFAT reads or sets.
const (
	bsBytesPerSector   = 0x0b
	bsSectorsPerClus   = 0x0d
	bsReservedSectors  = 0x0e
	bsNumFATs          = 0x10
	bsSectorsPerFAT32  = 0x24
	bsRootCluster      = 0x2c
	bsFSInfoSector     = 0x30
	bsBackupBootSector = 0x32
	bsTotalSectors32   = 0x20
	bsVolumeID32       = 0x43

	fsiFreeCount = 0x1e8
	fsiNextFree  = 0x1ec

	fatAttrLongName = 0x0f
	fatAttrDir      = 0x10
	fatClusterMask  = 0x0fffffff
	fatEndOfChain   = 0x0ffffff8
)

// fatEpoch is the earliest time a FAT directory entry can hold.
var fatEpoch = time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)

// normalizeFAT makes a FAT32 file system written by go-diskfs reproducible
// and clean for fsck.fat. go-diskfs v1.9.1 stamps directory entries (the
// volume label's always, "." and ".." with their directory's creation time)
// with time.Now() unless SOURCE_DATE_EPOCH is set in the process
// environment, and leaves the volume serial 0 in reproducible mode. It also
// gives empty files a cluster, points ".." of top-level directories at the
// root's cluster instead of 0, and leaves the free-cluster count unknown.
// So this walks every directory, sets every entry's times to mtime and fixes
// those entries, writes volumeID into both boot sectors and fills in FSInfo.
// With move, it also moves the file whose chain starts at move.first (a
// contiguous chain with free clusters after it) up by move.by clusters.
func normalizeFAT(f *os.File, off int64, mtime time.Time, volumeID uint32, move *chainMove) error {
	bs := make([]byte, 512)
	if _, err := f.ReadAt(bs, off); err != nil {
		return fmt.Errorf("reading boot sector: %w", err)
	}
	bytesPerSector := int64(binary.LittleEndian.Uint16(bs[bsBytesPerSector:]))
	spc := int64(bs[bsSectorsPerClus])
	reserved := int64(binary.LittleEndian.Uint16(bs[bsReservedSectors:]))
	numFATs := int64(bs[bsNumFATs])
	sectorsPerFAT := int64(binary.LittleEndian.Uint32(bs[bsSectorsPerFAT32:]))
	rootCluster := binary.LittleEndian.Uint32(bs[bsRootCluster:])
	backup := int64(binary.LittleEndian.Uint16(bs[bsBackupBootSector:]))
	fsInfo := int64(binary.LittleEndian.Uint16(bs[bsFSInfoSector:]))
	totalSectors := int64(binary.LittleEndian.Uint32(bs[bsTotalSectors32:]))
	if bytesPerSector != 512 || spc == 0 || numFATs == 0 || sectorsPerFAT == 0 {
		return errors.New("not a FAT32 boot sector")
	}

	var id [4]byte
	binary.LittleEndian.PutUint32(id[:], volumeID)
	for _, sector := range []int64{0, backup} {
		if _, err := f.WriteAt(id[:], off+sector*bytesPerSector+bsVolumeID32); err != nil {
			return fmt.Errorf("writing volume ID: %w", err)
		}
	}

	fatStart := off + reserved*bytesPerSector
	fat := make([]byte, sectorsPerFAT*bytesPerSector)
	if _, err := f.ReadAt(fat, fatStart); err != nil {
		return fmt.Errorf("reading FAT: %w", err)
	}
	clusterSize := spc * bytesPerSector
	dataStart := off + (reserved+numFATs*sectorsPerFAT)*bytesPerSector
	dataClusters := (totalSectors - reserved - numFATs*sectorsPerFAT) / spc
	fatChanged := false
	chain := func(first uint32) ([]uint32, error) {
		var cs []uint32
		for c := first; c < fatEndOfChain; c = binary.LittleEndian.Uint32(fat[4*int64(c):]) & fatClusterMask {
			if c < 2 || 4*int64(c) >= int64(len(fat)) || len(cs) > len(fat)/4 {
				return nil, fmt.Errorf("broken cluster chain at %d", c)
			}
			cs = append(cs, c)
		}
		return cs, nil
	}

	date, clock := fatDateTime(mtime)
	visited := map[uint32]bool{}
	var walk func(first uint32, isRoot bool) error
	walk = func(first uint32, isRoot bool) error {
		if visited[first] {
			return nil
		}
		visited[first] = true
		clusters, err := chain(first)
		if err != nil {
			return err
		}
		dir := make([]byte, int64(len(clusters))*clusterSize)
		for i, c := range clusters {
			if _, err := f.ReadAt(dir[int64(i)*clusterSize:][:clusterSize], dataStart+int64(c-2)*clusterSize); err != nil {
				return fmt.Errorf("reading directory cluster %d: %w", c, err)
			}
		}
		var subdirs []uint32
		for e := 0; e+32 <= len(dir); e += 32 {
			ent := dir[e : e+32]
			if ent[0] == 0x00 {
				break
			}
			if ent[0] == 0xe5 || ent[11] == fatAttrLongName {
				continue
			}
			ent[13] = 0 // creation time, 10 ms units
			binary.LittleEndian.PutUint16(ent[14:], clock)
			binary.LittleEndian.PutUint16(ent[16:], date)
			binary.LittleEndian.PutUint16(ent[18:], date) // last access date
			binary.LittleEndian.PutUint16(ent[22:], clock)
			binary.LittleEndian.PutUint16(ent[24:], date)
			name := string(ent[0:11])
			c := uint32(binary.LittleEndian.Uint16(ent[20:]))<<16 | uint32(binary.LittleEndian.Uint16(ent[26:]))
			isDir := ent[11]&fatAttrDir != 0
			size := binary.LittleEndian.Uint32(ent[28:])
			switch {
			case isDir && name == "..         " && !isRoot && c == rootCluster:
				// ".." naming the root holds 0, not the root's cluster.
				setEntryCluster(ent, 0)
			case isDir && name != ".          " && name != "..         ":
				subdirs = append(subdirs, c)
			case !isDir && move != nil && c == move.first:
				if err := move.apply(fat, chain, dataClusters); err != nil {
					return fmt.Errorf("moving %q: %w", name, err)
				}
				setEntryCluster(ent, c+move.by)
				fatChanged = true
				move = nil
			case !isDir && size == 0 && c != 0 && ent[11]&0x08 == 0:
				// An empty file owns no clusters: free its chain.
				cs, err := chain(c)
				if err != nil {
					return err
				}
				for _, fc := range cs {
					binary.LittleEndian.PutUint32(fat[4*int64(fc):], 0)
				}
				setEntryCluster(ent, 0)
				fatChanged = true
			}
		}
		for i, c := range clusters {
			if _, err := f.WriteAt(dir[int64(i)*clusterSize:][:clusterSize], dataStart+int64(c-2)*clusterSize); err != nil {
				return fmt.Errorf("writing directory cluster %d: %w", c, err)
			}
		}
		for _, c := range subdirs {
			if err := walk(c, false); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(rootCluster, true); err != nil {
		return err
	}
	if move != nil {
		return fmt.Errorf("no file starts at cluster %d", move.first)
	}
	if fatChanged {
		for i := int64(0); i < numFATs; i++ {
			if _, err := f.WriteAt(fat, fatStart+i*sectorsPerFAT*bytesPerSector); err != nil {
				return fmt.Errorf("writing FAT %d: %w", i, err)
			}
		}
	}
	return writeFSInfo(f, off+fsInfo*bytesPerSector, fat, dataClusters)
}

// chainMove moves a file's data up by some clusters; see normalizeFAT.
type chainMove struct {
	first, by uint32
}

// apply rewrites the FAT for the move: the chain from first, contiguous,
// becomes one as long from first+by, over clusters that were free.
func (m *chainMove) apply(fat []byte, chain func(uint32) ([]uint32, error), dataClusters int64) error {
	cs, err := chain(m.first)
	if err != nil {
		return err
	}
	for i, c := range cs {
		if c != m.first+uint32(i) {
			return fmt.Errorf("chain from cluster %d is not contiguous", m.first)
		}
	}
	last := m.first + uint32(len(cs)) - 1
	entry := func(c uint32) []byte { return fat[4*int64(c):][:4] }
	for c := last + 1; c <= last+m.by; c++ {
		if int64(c) >= dataClusters+2 || 4*int64(c)+4 > int64(len(fat)) || binary.LittleEndian.Uint32(entry(c))&fatClusterMask != 0 {
			return fmt.Errorf("cluster %d after the chain is not free", c)
		}
	}
	for c := m.first; c < m.first+m.by; c++ {
		binary.LittleEndian.PutUint32(entry(c), 0)
	}
	for c := m.first + m.by; c < last+m.by; c++ {
		binary.LittleEndian.PutUint32(entry(c), c+1)
	}
	binary.LittleEndian.PutUint32(entry(last+m.by), fatClusterMask) // end of chain
	return nil
}

func setEntryCluster(ent []byte, c uint32) {
	binary.LittleEndian.PutUint16(ent[20:], uint16(c>>16))
	binary.LittleEndian.PutUint16(ent[26:], uint16(c))
}

// writeFSInfo records the free cluster count and the first free cluster,
// which go-diskfs leaves as "unknown" and fsck.fat then complains about.
func writeFSInfo(f *os.File, at int64, fat []byte, dataClusters int64) error {
	var free, next uint32
	next = 0xffffffff
	for c := int64(2); c < dataClusters+2 && 4*c < int64(len(fat)); c++ {
		if binary.LittleEndian.Uint32(fat[4*c:])&fatClusterMask == 0 {
			free++
			if next == 0xffffffff {
				next = uint32(c)
			}
		}
	}
	var b [8]byte
	binary.LittleEndian.PutUint32(b[0:], free)
	binary.LittleEndian.PutUint32(b[4:], next)
	if _, err := f.WriteAt(b[:], at+fsiFreeCount); err != nil {
		return fmt.Errorf("writing FSInfo: %w", err)
	}
	return nil
}

// fatDateTime encodes t (UTC, clamped to the FAT epoch) as FAT date and
// time words; FAT keeps seconds in 2-second steps.
func fatDateTime(t time.Time) (date, clock uint16) {
	t = t.UTC()
	if t.Before(fatEpoch) {
		t = fatEpoch
	}
	if t.Year() > 2107 {
		t = time.Date(2107, 12, 31, 23, 59, 58, 0, time.UTC)
	}
	date = uint16((t.Year()-1980)<<9 | int(t.Month())<<5 | t.Day())
	clock = uint16(t.Hour()<<11 | t.Minute()<<5 | t.Second()/2)
	return date, clock
}
