package disk

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ironcore-dev/os-builder/initrd/gpt"
)

// Install mode (initrd/pid1's installMode drives it) writes the disk image
// to the target disk:
//
//  1. select the target (exactly one disk) and look at what it holds: blank
//     and os-builder disks are fine, a foreign one needs osb.install.wipe=1;
//  2. stream the image, verifying its sha256. The first MiB holds the
//     image's GPT; once it is in, the plan is checked (the image's osb-esp
//     and osb-root must fit the disk, and end before a preserved osb-data
//     partition) before anything is written;
//  3. "invalidate": zero the first MiB outside the GPT, then write a GPT
//     holding only the preserved osb-data partition (or none), so an
//     interrupted install leaves a disk that does not boot and that the
//     next installer run recognises as its own;
//  4. write the bytes of the ESP and root partition ranges, nothing else;
//  5. after the digest matched: sync, write the final GPT (the image's
//     partitions plus the preserved osb-data entry) backup first, primary
//     last - the primary header is the commit point - sync, reboot.
//
// A digest mismatch or failed download stops before step 5: the disk is then
// "not installed" (step 3's table) with its data partition intact.

// imageSectorSize is the sector size os-builder disk images are made with.
const imageSectorSize = 512

// imageHeaderLen is how much of the image is buffered before planning: the
// partitions start at 1 MiB, and the GPT is before that.
const imageHeaderLen = 1 << 20

// installPlan is what gets written where.
type installPlan struct {
	table    *gpt.Table // the final table
	interim  *gpt.Table // the table written before the data
	ranges   [][2]int64
	total    int64 // bytes to write
	preserve *gpt.Partition
}

// planInstall checks the image's table against the disk and returns the
// plan. keep is the disk's preserved osb-data partition, or nil.
func planInstall(image *gpt.Table, diskSectorSize int, diskSize int64, keep *gpt.Partition) (*installPlan, error) {
	esp, root := image.ByName(PartLabelESP), image.ByName(PartLabelRoot)
	if esp == nil || root == nil {
		return nil, fmt.Errorf("the image's GPT lacks an %s or %s partition; is it an os-builder disk image?", PartLabelESP, PartLabelRoot)
	}
	final := &gpt.Table{SectorSize: diskSectorSize, DiskGUID: image.DiskGUID}
	interim := &gpt.Table{SectorSize: diskSectorSize, DiskGUID: image.DiskGUID}
	_, lastUsable := final.Usable(diskSize)
	limit := int64(lastUsable+1) * int64(diskSectorSize)
	limitWhat := "the end of the disk"
	if keep != nil {
		limit, _ = keep.ByteRange(diskSectorSize)
		limitWhat = "the preserved " + PartLabelData + " partition"
	}
	p := &installPlan{table: final, interim: interim, preserve: keep}
	for _, src := range []*gpt.Partition{esp, root} {
		start, end := src.ByteRange(image.SectorSize)
		if start%int64(diskSectorSize) != 0 || end%int64(diskSectorSize) != 0 {
			return nil, fmt.Errorf("the image's %s partition is not aligned to the disk's %d-byte sectors", src.Name, diskSectorSize)
		}
		if end > limit {
			return nil, fmt.Errorf("the image's %s partition ends at byte %d, past %s at byte %d: the image does not fit (disk %s is %d bytes)",
				src.Name, end, limitWhat, limit, "target", diskSize)
		}
		q := *src
		q.FirstLBA = uint64(start / int64(diskSectorSize))
		q.LastLBA = uint64(end/int64(diskSectorSize)) - 1
		final.Partitions = append(final.Partitions, q)
		p.ranges = append(p.ranges, [2]int64{start, end})
		p.total += end - start
	}
	if keep != nil {
		d := *keep
		for _, q := range final.Partitions {
			if q.Index == d.Index {
				d.Index = 3 // the image uses the slot; the label is what counts
			}
		}
		final.Partitions = append(final.Partitions, d)
		interim.Partitions = append(interim.Partitions, d)
	}
	// Check both tables encode before anything is written.
	for _, t := range []*gpt.Table{final, interim} {
		if _, _, _, err := t.Encode(diskSize); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// WriteTable writes t to the disk: backup then primary when commit (the
// primary is what firmware and kernel read first, so it goes last), else
// primary then backup. Each copy is synced before the next.
func WriteTable(f *os.File, t *gpt.Table, size int64, commit bool) error {
	primary, backup, backupOff, err := t.Encode(size)
	if err != nil {
		return err
	}
	writes := []struct {
		b   []byte
		off int64
	}{{primary, 0}, {backup, backupOff}}
	if commit {
		writes[0], writes[1] = writes[1], writes[0]
	}
	for _, w := range writes {
		if _, err := f.WriteAt(w.b, w.off); err != nil {
			return fmt.Errorf("write GPT at byte %d of %s: %w", w.off, f.Name(), err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", f.Name(), err)
		}
	}
	return nil
}

// clearStart zeroes the disk from the end of t's primary copy to its first
// partition or the end of the first MiB, whichever comes first: a foreign
// disk overwritten with osb.install.wipe=1 may keep a signature there (a
// btrfs superblock at 64 KiB), and Classify trusts no GPT over one.
func clearStart(f *os.File, t *gpt.Table, size int64) error {
	primary, _, _, err := t.Encode(size)
	if err != nil {
		return err
	}
	end := int64(probeWindow)
	for _, p := range t.Partitions {
		start, _ := p.ByteRange(t.SectorSize)
		end = min(end, start)
	}
	if off := int64(len(primary)); end > off {
		if _, err := f.WriteAt(make([]byte, end-off), off); err != nil {
			return fmt.Errorf("clear bytes %d-%d of %s: %w", off, end, f.Name(), err)
		}
	}
	return nil
}

// Installer receives the image stream (a download: Begin, then Write) and
// writes the planned ranges onto the disk; see NewInstaller.
type Installer struct {
	disk       *os.File
	sectorSize int
	size       int64
	keep       *gpt.Partition
	logf       func(string, ...any)

	off      int64
	received int64 // bytes of the stream so far
	header   bytes.Buffer
	plan     *installPlan
	written  int64
	start    time.Time
}

// NewInstaller installs onto disk, of sectorSize-byte sectors and size
// bytes, keeping the partition keep (the disk's osb-data, or nil). logf
// prints its progress.
func NewInstaller(disk *os.File, sectorSize int, size int64, keep *gpt.Partition, logf func(string, ...any)) *Installer {
	return &Installer{disk: disk, sectorSize: sectorSize, size: size, keep: keep, logf: logf}
}

// Begin starts the stream over, size bytes long (-1 if unknown): it is
// called at the start of every download attempt.
func (s *Installer) Begin(size int64) (io.Writer, error) {
	// The image cannot be larger than the disk it must fit on: refuse an
	// announced length, or a stream, that says otherwise.
	if size > s.size {
		return nil, fmt.Errorf("the image is %d bytes, larger than the target disk (%d bytes)", size, s.size)
	}
	s.off, s.received, s.written, s.plan = 0, 0, 0, nil
	s.header.Reset()
	s.start = time.Now()
	return s, nil
}

func (s *Installer) Write(b []byte) (int, error) {
	n := len(b)
	if s.received+int64(n) > s.size {
		return 0, fmt.Errorf("the image stream is longer than the target disk (%d bytes)", s.size)
	}
	s.received += int64(n)
	if s.plan == nil {
		need := imageHeaderLen - s.header.Len()
		take := min(need, len(b))
		s.header.Write(b[:take])
		b = b[take:]
		if s.header.Len() < imageHeaderLen {
			return n, nil
		}
		if err := s.makePlan(); err != nil {
			return 0, err
		}
		head := s.header.Bytes()
		if err := s.writeRanges(head, 0); err != nil {
			return 0, err
		}
		s.off = int64(len(head))
	}
	if err := s.writeRanges(b, s.off); err != nil {
		return 0, err
	}
	s.off += int64(len(b))
	return n, nil
}

func (s *Installer) makePlan() error {
	image, err := gpt.ReadAt(bytes.NewReader(s.header.Bytes()), imageSectorSize, 1)
	if err != nil {
		return fmt.Errorf("the image's partition table: %w", err)
	}
	p, err := planInstall(image, s.sectorSize, s.size, s.keep)
	if err != nil {
		return fmt.Errorf("%w; nothing was written", err)
	}
	if err := clearStart(s.disk, p.table, s.size); err != nil {
		return err
	}
	// Step 3: from here on the disk does not boot until the final table.
	// Its sync covers clearStart's write too.
	if err := WriteTable(s.disk, p.interim, s.size, false); err != nil {
		return err
	}
	s.logf("install: old partition table replaced by an interim one (%d partition(s) kept); writing %s", len(p.interim.Partitions), mibString(p.total))
	s.plan = p
	return nil
}

// writeRanges writes the part of b (which is the image at offset off) that
// falls in the planned partition ranges.
func (s *Installer) writeRanges(b []byte, off int64) error {
	end := off + int64(len(b))
	for _, r := range s.plan.ranges {
		lo, hi := max(off, r[0]), min(end, r[1])
		if lo >= hi {
			continue
		}
		if _, err := s.disk.WriteAt(b[lo-off:hi-off], lo); err != nil {
			return fmt.Errorf("write %s at byte %d: %w", s.disk.Name(), lo, err)
		}
		s.written += hi - lo
	}
	return nil
}

// Table is the final partition table (the image's partitions plus the
// kept one) once the image's first MiB is in, the plan checked and the
// interim table written; nil before.
func (s *Installer) Table() *gpt.Table {
	if s.plan == nil {
		return nil
	}
	return s.plan.table
}

// Written is how many bytes of the planned ranges went to the disk, and
// when the stream began (the last Begin).
func (s *Installer) Written() (n int64, start time.Time) { return s.written, s.start }

// mibString is n bytes in MiB, as the init's console lines say sizes.
func mibString(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// AdmitTarget refuses to install onto a foreign disk unless wipe
// (osb.install.wipe=1) allows it; reason says what the disk holds.
func AdmitTarget(dev string, kind Kind, reason string, wipe bool) error {
	if kind == Foreign && !wipe {
		return fmt.Errorf("install target %s is not blank: %s; refusing to overwrite it (add osb.install.wipe=1 to allow that); nothing was written", dev, reason)
	}
	return nil
}
