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
	v, err := openFAT32(f, off)
	if err != nil {
		return err
	}
	var id [4]byte
	binary.LittleEndian.PutUint32(id[:], volumeID)
	for _, sector := range []int64{0, v.backup} {
		if _, err := f.WriteAt(id[:], off+sector*v.bytesPerSector+bsVolumeID32); err != nil {
			return fmt.Errorf("writing volume ID: %w", err)
		}
	}
	v.date, v.clock = fatDateTime(mtime)
	v.move = move
	v.visited = map[uint32]bool{}
	if err := v.walk(v.rootCluster, true); err != nil {
		return err
	}
	if v.move != nil {
		return fmt.Errorf("no file starts at cluster %d", v.move.first)
	}
	if v.fatChanged {
		for i := int64(0); i < v.numFATs; i++ {
			if _, err := f.WriteAt(v.fat, v.fatStart+i*v.sectorsPerFAT*v.bytesPerSector); err != nil {
				return fmt.Errorf("writing FAT %d: %w", i, err)
			}
		}
	}
	return writeFSInfo(f, off+v.fsInfo*v.bytesPerSector, v.fat, v.dataClusters)
}

// fatVolume is a FAT32 file system at an offset of a file, its FAT in memory,
// while normalizeFAT walks its directories.
type fatVolume struct {
	f                                           *os.File
	bytesPerSector, clusterSize, numFATs        int64
	sectorsPerFAT, backup, fsInfo, dataClusters int64
	fatStart, dataStart                         int64
	rootCluster                                 uint32
	fat                                         []byte
	fatChanged                                  bool

	date, clock uint16
	move        *chainMove
	visited     map[uint32]bool
}

// openFAT32 reads the boot sector and the first FAT.
func openFAT32(f *os.File, off int64) (*fatVolume, error) {
	bs := make([]byte, 512)
	if _, err := f.ReadAt(bs, off); err != nil {
		return nil, fmt.Errorf("reading boot sector: %w", err)
	}
	v := &fatVolume{f: f,
		bytesPerSector: int64(binary.LittleEndian.Uint16(bs[bsBytesPerSector:])),
		numFATs:        int64(bs[bsNumFATs]),
		sectorsPerFAT:  int64(binary.LittleEndian.Uint32(bs[bsSectorsPerFAT32:])),
		rootCluster:    binary.LittleEndian.Uint32(bs[bsRootCluster:]),
		backup:         int64(binary.LittleEndian.Uint16(bs[bsBackupBootSector:])),
		fsInfo:         int64(binary.LittleEndian.Uint16(bs[bsFSInfoSector:])),
	}
	spc := int64(bs[bsSectorsPerClus])
	reserved := int64(binary.LittleEndian.Uint16(bs[bsReservedSectors:]))
	totalSectors := int64(binary.LittleEndian.Uint32(bs[bsTotalSectors32:]))
	if v.bytesPerSector != 512 || spc == 0 || v.numFATs == 0 || v.sectorsPerFAT == 0 {
		return nil, errors.New("not a FAT32 boot sector")
	}
	v.fatStart = off + reserved*v.bytesPerSector
	v.fat = make([]byte, v.sectorsPerFAT*v.bytesPerSector)
	if _, err := f.ReadAt(v.fat, v.fatStart); err != nil {
		return nil, fmt.Errorf("reading FAT: %w", err)
	}
	v.clusterSize = spc * v.bytesPerSector
	v.dataStart = off + (reserved+v.numFATs*v.sectorsPerFAT)*v.bytesPerSector
	v.dataClusters = (totalSectors - reserved - v.numFATs*v.sectorsPerFAT) / spc
	return v, nil
}

// chain is the clusters of the chain that starts at first.
func (v *fatVolume) chain(first uint32) ([]uint32, error) {
	var cs []uint32
	for c := first; c < fatEndOfChain; c = binary.LittleEndian.Uint32(v.fat[4*int64(c):]) & fatClusterMask {
		if c < 2 || 4*int64(c) >= int64(len(v.fat)) || len(cs) > len(v.fat)/4 {
			return nil, fmt.Errorf("broken cluster chain at %d", c)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// walk normalizes the directory at cluster first and those below it.
func (v *fatVolume) walk(first uint32, isRoot bool) error {
	if v.visited[first] {
		return nil
	}
	v.visited[first] = true
	clusters, err := v.chain(first)
	if err != nil {
		return err
	}
	dir := make([]byte, int64(len(clusters))*v.clusterSize)
	for i, c := range clusters {
		if _, err := v.f.ReadAt(dir[int64(i)*v.clusterSize:][:v.clusterSize], v.dataStart+int64(c-2)*v.clusterSize); err != nil {
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
		sub, isSubdir, err := v.normalizeEntry(ent, isRoot)
		if err != nil {
			return err
		}
		if isSubdir {
			subdirs = append(subdirs, sub)
		}
	}
	for i, c := range clusters {
		if _, err := v.f.WriteAt(dir[int64(i)*v.clusterSize:][:v.clusterSize], v.dataStart+int64(c-2)*v.clusterSize); err != nil {
			return fmt.Errorf("writing directory cluster %d: %w", c, err)
		}
	}
	for _, c := range subdirs {
		if err := v.walk(c, false); err != nil {
			return err
		}
	}
	return nil
}

// normalizeEntry sets a directory entry's times, moves or frees its chain
// where it has to, and returns the cluster of the subdirectory it names
// (isSubdir).
func (v *fatVolume) normalizeEntry(ent []byte, isRoot bool) (sub uint32, isSubdir bool, err error) {
	ent[13] = 0 // creation time, 10 ms units
	binary.LittleEndian.PutUint16(ent[14:], v.clock)
	binary.LittleEndian.PutUint16(ent[16:], v.date)
	binary.LittleEndian.PutUint16(ent[18:], v.date) // last access date
	binary.LittleEndian.PutUint16(ent[22:], v.clock)
	binary.LittleEndian.PutUint16(ent[24:], v.date)
	name := string(ent[0:11])
	c := uint32(binary.LittleEndian.Uint16(ent[20:]))<<16 | uint32(binary.LittleEndian.Uint16(ent[26:]))
	isDir := ent[11]&fatAttrDir != 0
	size := binary.LittleEndian.Uint32(ent[28:])
	switch {
	case isDir && name == "..         " && !isRoot && c == v.rootCluster:
		// ".." naming the root holds 0, not the root's cluster.
		setEntryCluster(ent, 0)
	case isDir && name != ".          " && name != "..         ":
		return c, true, nil
	case !isDir && v.move != nil && c == v.move.first:
		if err := v.move.apply(v.fat, v.chain, v.dataClusters); err != nil {
			return 0, false, fmt.Errorf("moving %q: %w", name, err)
		}
		setEntryCluster(ent, c+v.move.by)
		v.fatChanged = true
		v.move = nil
	case !isDir && size == 0 && c != 0 && ent[11]&0x08 == 0:
		// An empty file owns no clusters: free its chain.
		cs, err := v.chain(c)
		if err != nil {
			return 0, false, err
		}
		for _, fc := range cs {
			binary.LittleEndian.PutUint32(v.fat[4*int64(fc):], 0)
		}
		setEntryCluster(ent, 0)
		v.fatChanged = true
	}
	return 0, false, nil
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
