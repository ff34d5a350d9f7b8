package disk

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ironcore-dev/os-builder/initrd/gpt"
)

// Partition names of docs/cmdline.md.
const (
	PartLabelESP  = "osb-esp"
	PartLabelRoot = "osb-root"
	PartLabelData = "osb-data"
)

// Kind is what a disk holds before an install.
type Kind int

const (
	Blank   Kind = iota // no partition table, no known signature
	Ours                // a GPT whose partitions are all osb-*
	Foreign             // anything else
)

func (k Kind) String() string {
	return [...]string{"blank", "an os-builder disk", "foreign"}[k]
}

// Classify says what a disk holds and, for Foreign, why. The
// signatures come first: a tool that writes its header at the start of a
// disk (cryptsetup, mkswap, mkfs) leaves an older GPT's backup at the end,
// often its primary header too, so no GPT is trusted over a known
// signature in the first MiB (issue 22, finding 1). Then:
//   - a valid primary GPT decides on its partitions' names. Content at the
//     end of the disk lies in a partition (osb-data runs to the end) and
//     may be anything, a stale md superblock included;
//   - a damaged primary is foreign, whatever the backup says;
//   - without a primary, the backup counts only if the first MiB is all
//     zeros: someone cleared the start and wrote nothing there since;
//   - without either, the signatures at both ends and any non-zero byte
//     in the first MiB make the disk foreign (signatures.go).
func Classify(r io.ReaderAt, sectorSize int, size int64) (Kind, *gpt.Table, string, error) {
	d, err := newDiskProbe(r, size)
	if err != nil {
		return 0, nil, "", err
	}
	found := signaturesOn(d)
	if d.err != nil {
		return 0, nil, "", fmt.Errorf("read the disk's signatures: %w", d.err)
	}
	primary, perr := gpt.ReadPrimary(r, sectorSize, size)
	backup, berr := gpt.ReadBackup(r, sectorSize, size)
	if errors.Is(perr, gpt.ErrNoGPT) && berr != nil {
		if reason := foreignContent(d, found); reason != "" {
			return Foreign, nil, reason, nil
		}
		return Blank, nil, "", nil
	}
	if over := overwrittenStart(found); len(over) > 0 {
		what := "a GPT"
		switch {
		case perr == nil:
		case errors.Is(perr, gpt.ErrNoGPT):
			what = "the backup GPT at the end of the disk"
		default:
			what = "a damaged GPT (" + perr.Error() + ")"
		}
		return Foreign, nil, fmt.Sprintf("%s in its first MiB, next to %s: the start of the disk was written after its table", holds(over), what), nil
	}
	switch {
	case perr == nil:
		return byPartitionNames(primary)
	case !errors.Is(perr, gpt.ErrNoGPT):
		return Foreign, nil, "it has a damaged GPT (" + perr.Error() + ")", nil
	}
	if i := firstNonZero(d.head); i >= 0 {
		return Foreign, nil, fmt.Sprintf("it has no primary GPT, only the backup GPT at the end of the disk, and its first MiB is not blank (non-zero byte at %d): the start was written after the table", i), nil
	}
	return byPartitionNames(backup)
}

// byPartitionNames calls a disk with a valid GPT ours when every partition
// has an osb- name.
func byPartitionNames(t *gpt.Table) (Kind, *gpt.Table, string, error) {
	var foreign []string
	for _, p := range t.Partitions {
		if !strings.HasPrefix(p.Name, "osb-") {
			foreign = append(foreign, fmt.Sprintf("%d:%q", p.Index, p.Name))
		}
	}
	if len(foreign) > 0 {
		return Foreign, t, "its GPT has partitions not made by os-builder: " + strings.Join(foreign, " "), nil
	}
	return Ours, t, "", nil
}
