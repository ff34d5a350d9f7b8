package pid1

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ironcore-dev/os-builder/initrd/gpt"
)

// Partition names of docs/cmdline.md.
const (
	partLabelESP  = "osb-esp"
	partLabelRoot = "osb-root"
	partLabelData = "osb-data"
)

// diskKind is what a disk holds before an install.
type diskKind int

const (
	diskBlank   diskKind = iota // no partition table, no known signature
	diskOurs                    // a GPT whose partitions are all osb-*
	diskForeign                 // anything else
)

func (k diskKind) String() string {
	return [...]string{"blank", "an os-builder disk", "foreign"}[k]
}

// classifyDisk looks at a disk's partition table, or without one at the
// signatures at both ends (signatures.go), and says what it holds; for
// diskForeign the reason says why. A valid GPT decides alone: content at
// the end of the disk then lies in a partition (osb-data runs to the end)
// and may be anything, a stale md superblock included.
func classifyDisk(r io.ReaderAt, sectorSize int, size int64) (diskKind, *gpt.Table, string, error) {
	t, err := gpt.Read(r, sectorSize, size)
	if err == nil {
		var foreign []string
		for _, p := range t.Partitions {
			if !strings.HasPrefix(p.Name, "osb-") {
				foreign = append(foreign, fmt.Sprintf("%d:%q", p.Index, p.Name))
			}
		}
		if len(foreign) > 0 {
			return diskForeign, t, "its GPT has partitions not made by os-builder: " + strings.Join(foreign, " "), nil
		}
		return diskOurs, t, "", nil
	}
	if !errors.Is(err, gpt.ErrNoGPT) {
		return diskForeign, nil, "it has a damaged GPT (" + err.Error() + ")", nil
	}
	d, err := newDiskProbe(r, size)
	if err != nil {
		return 0, nil, "", err
	}
	reason := foreignContent(d)
	if d.err != nil {
		return 0, nil, "", fmt.Errorf("read the disk's signatures: %w", d.err)
	}
	if reason != "" {
		return diskForeign, nil, reason, nil
	}
	return diskBlank, nil, "", nil
}
